/* cli.h — subcommands of the rrfp-mm executable. Each lives in its own file and returns the
 * process exit status (0 ok, 1 runtime error, 2 usage error). */
#ifndef RRFP_CLI_H
#define RRFP_CLI_H

typedef int (*CliCommandFn)(int argc, char** argv);
typedef struct {
    const char* name;
    CliCommandFn fn;
    const char* summary;
} CliCommand;

int cmd_version(int argc, char** argv);
int cmd_train(int argc, char** argv);
int cmd_eval(int argc, char** argv);
int cmd_tensors(int argc, char** argv);
int cmd_tokenizer(int argc, char** argv);
int cmd_sim(int argc, char** argv);
int cmd_trace(int argc, char** argv);
int cmd_demo_data(int argc, char** argv);
int cmd_pack(int argc, char** argv);
int cmd_import(int argc, char** argv);
int cmd_import_llava(const char* kind, const char* hf, const char* out); /* cmd_import_llava.c: llava | clip */
int cmd_export(int argc, char** argv);                                    /* cmd_export.c: export hf */
int cmd_report(int argc, char** argv);
int cmd_generate(int argc, char** argv);

/* The recipe file with its --set overrides, validated (args.c); NULL after printing the error. */
#include "runtime/train/recipe.h"
Recipe* cli_recipe_from_args(const char* path, const char** sets, int n_sets);

#endif
