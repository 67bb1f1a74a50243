#!/usr/bin/env bash
# deps.sh — install the Debian packages rrfp-mm needs (as root), or print the exact apt-get line.
# Usage: scripts/deps.sh [--check] [--with-browser | --demo]
#   --check: only report, never install; --with-browser: also Debian's chromium for the report page's
#   browser test (make test asks for it, make demo does not). A missing chromium that cannot be
#   installed here is a note, not a failure: report_browser then skips, saying why.
#   --demo: only what `make demo` needs (the CPU build of rrfp-mm and python3 for its summary): the
#   suite's references (PyTorch, scikit-image's photographs, node, clang's fuzzers) are a large part
#   of a fresh machine's set-up time and the demo uses none of them.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config
  libblis-openmp-dev libopenblas-dev      # GEMM: BLIS (default) and OpenBLAS (benchmarked against)
  libturbojpeg0-dev libjpeg62-turbo-dev   # JPEG decode/encode
  libpng-dev                              # PNG decode (pack, loader, generate)
  libgif-dev                              # GIF decode (pack, loader, generate)
  libzstd-dev zstd                        # shard frames
  libopenmpi-dev openmpi-bin              # pipeline / data parallel transport
  libcjson-dev libpcre2-dev   # manifests/JSON, tokenizer split regex
  python3-torch python3-numpy             # independent PyTorch reference (tests/support/ref)
  python3-skimage python3-pil             # real test photographs; Pillow loader baseline (bench)
  clang libclang-rt-14-dev                # libFuzzer targets
  ninja-build                             # the build's generator where installed (Makefile: both cores busy to the end)
)
# make demo: the CPU build (CMakeLists.txt's REQUIRED packages with BLIS) and the summary's python3
PKGS_DEMO=(
  build-essential cmake pkg-config libblis-openmp-dev libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev libgif-dev
  libzstd-dev libopenmpi-dev openmpi-bin libcjson-dev libpcre2-dev python3
)

check=0 browser=0 demo=0
for a in "$@"; do
  case "$a" in
    --check) check=1 ;;
    --with-browser) browser=1 ;;
    --demo) demo=1 ;;
    *) echo "scripts/deps.sh: unknown option '$a' (--check, --with-browser, --demo)" >&2; exit 2 ;;
  esac
done

[ "$demo" = 1 ] && [ "$browser" = 1 ] && { echo "scripts/deps.sh: --demo and --with-browser exclude each other" >&2; exit 2; }
[ "$demo" = 1 ] && PKGS=("${PKGS_DEMO[@]}")

missing=()
# node + npm (Hugging Face tokenizers peer test, tests/support/node): Debian's nodejs unless a node is present.
[ "$demo" = 1 ] || command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
for p in "${PKGS[@]}"; do
  grep -q "install ok installed" <<<"$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" || missing+=("$p")
done
if [ "$browser" = 1 ] && ! command -v chromium >/dev/null 2>&1; then
  if [ "$check" = 0 ] && [ "$(id -u)" = 0 ]; then
    missing+=(chromium)
  else
    echo "rrfp-mm: note: chromium is not installed: the report page's browser test (report_browser) will be" \
         "skipped; as root: apt-get install -y chromium" >&2
  fi
fi
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$check" = 1 ] || [ "$(id -u)" != 0 ]; then
  echo "rrfp-mm: missing Debian packages: ${missing[*]}" >&2
  echo "---> run as root:  apt-get update && apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "rrfp-mm: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
