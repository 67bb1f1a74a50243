# lint_lib.sh — sourced by the grep lints (lint_no_shell.sh, lint_standalone.sh), which define `scan FOLDER` (prints
# what it flags, exit status 0 when it flagged anything) and set src (the checkout) and tmp (a scratch folder).
# A lint first proves its scan on files it writes (a clean one passes, each bad form is flagged), then scans src.
scan_passes() { # folder: the scan flags nothing in it
  if scan "$1" >/dev/null; then echo "FAIL: the scan flags a clean file"; exit 1; fi
}
scan_flags() { # folder form: the scan flags the folder holding form
  scan "$1" >/dev/null || { echo "FAIL: the scan misses: $2"; exit 1; }
}
scan_tree() { # why: the checkout has nothing flagged, or FAIL: why, then the hits
  local hits
  hits=$(scan "$src")
  if [ -n "$hits" ]; then
    echo "FAIL: $1"
    echo "$hits"
    exit 1
  fi
}
