/* linkcheck.c — the one source of the link-check shared objects (CMakeLists.txt rrfp_library): each
 * folder's library is linked alone with its declared dependencies and --no-undefined, so a call from a
 * lower folder into a higher one fails the build. Nothing here is used at run time. */
int rrfp_linkcheck_anchor(void);
int rrfp_linkcheck_anchor(void) { return 0; }
