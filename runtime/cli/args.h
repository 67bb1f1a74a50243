/* args.h — the argument idioms every subcommand shares: --help, integer options, a recipe with --set. */
#ifndef RRFP_CLI_ARGS_H
#define RRFP_CLI_ARGS_H

#include <stdio.h>

#include "runtime/train/recipe.h"

/* a is --help or -h. */
int cli_is_help(const char* a);

/* s as a whole decimal integer in [lo, hi] into *out: 0, or -1 after printing
 * "rrfp-mm CMD: OPT expects an integer in [lo, hi], got 's'". */
int cli_parse_long(const char* cmd, const char* opt, const char* s, long lo, long hi, long* out);

/* A command with subcommands (`rrfp-mm tokenizer encode ...`): 1 when argv asks for no subcommand (the usage on
 * stderr, *rc = 2) or for --help / -h anywhere (the usage on stdout, *rc = 0); else 0. */
int cli_sub_help(int argc, char** argv, void (*usage)(FILE*), int* rc);

/* The recipe a command was given with its --set overrides (cli_recipe_from_args), `sets` freed: NULL when
 * !given (the usage on stderr) or when the recipe is refused (the error printed); the command then exits 2. */
Recipe* cli_recipe_given(int given, const char* path, const char** sets, int n_sets, void (*usage)(FILE*));

/* Among the n names, the one a typo of `word` most likely meant: the nearest by rr_edit_distance when it is at
 * most 1 (2 for words of 6 characters or more) and less than half the word, else the only name `word` is a
 * prefix of (4 characters or more); NULL when none. */
const char* cli_nearest(const char* word, const char* const* names, int n);

/* An argument CMD's parser does not take, said on stderr with what to do, then the usage: an option the usage
 * shows, given last ("rrfp-mm CMD: --out needs a value") or as --opt=value; an unknown option, with the option
 * of the usage it most likely meant ("rrfp-mm CMD: unknown option '--dryrun'; did you mean '--dry-run'?"); or an
 * unexpected word ("rrfp-mm CMD: unexpected argument 'x'"). The options come from the usage text itself, so a
 * suggestion is always one the help shows (tests/lint/lint_cli_docs.py: every option taken is shown). With scope
 * (sub-commands that share one usage: "rrfp-mm tokenizer encode "), only the usage lines holding it and the indented
 * lines that continue them are read. */
void cli_unknown_option(const char* cmd, const char* arg, void (*usage)(FILE*), const char* scope);

/* A second recipe word: "rrfp-mm CMD: more than one recipe ('first', 'second')" and the usage, on stderr. */
void cli_second_recipe(const char* cmd, const char* first, const char* second, void (*usage)(FILE*));

#endif
