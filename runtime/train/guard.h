/* guard.h — what a training job checks before it starts (docs/reliability.md: "a job refuses before it
 * starts what it can know will fail"): the run folder's lock, the memory the layout needs, threads
 * against the cores. Each returns 0, or -1 with a message; none exits. */
#ifndef RRFP_TRAIN_GUARD_H
#define RRFP_TRAIN_GUARD_H

#include <stddef.h>

#include "engine/engine.h"
#include "runtime/comm/comm.h"
#include "runtime/train/recipe.h"

/* Take the advisory lock RUN_DIR/.lock (flock, exclusive, not waiting) for the life of the process and
 * write "pid P host H" into it. Returns the open descriptor (keep it open: closing it releases the
 * lock), or -1 with a message naming the holder's pid and host when another job holds it. */
int guard_run_lock(const char* run_dir, char* err, size_t err_len);
void guard_run_unlock(int fd);
/* The same lock on checkpoint folder CKPT_ROOT/.lock (created first), "pid P host H run folder R" in it,
 * so that two jobs with different run folders but one checkpoint.dir cannot prune each other's
 * checkpoints. *fd = the descriptor (release with guard_run_unlock), or -1 when ckpt_root is run_dir
 * itself (its lock covers it). Returns 0, or -1 with a message naming the folder and the holder. */
int guard_ckpt_lock(const char* ckpt_root, const char* run_dir, int* fd, char* err, size_t err_len);
/* Is lock descriptor fd still DIR/.lock (1), or was that folder moved away since it was taken (0)? fd
 * -1: 1. */
int guard_lock_current(int fd, const char* dir);

/* Refuse when this host's ranks need more than the memory available: `need` = this rank's bytes
 * (train_rank_bytes), summed over the ranks of `world` on this host for the cpu backend, or this
 * rank's alone against its device's free memory for cuda. Collective over world. allow = 1
 * (runtime.allow_overcommit) turns a refusal into a warning. `detail` is appended to the message (the
 * dry run's figures). */
int guard_memory(const Backend* be, Comm* world, double need, const char* detail, int allow, char* err,
                 size_t err_len);

/* Recipe.device_memory, from which the default memory budget comes (train_budget_gib): with runtime.memory_budget
 * unset and runtime.allow_overcommit off, on a backend whose device reports its memory (BackendDevice.memory: the
 * CUDA device's total bytes), that total in GiB, the smallest over the ranks of `world` (NULL: this process
 * alone) so that every rank splits the layers alike; 0 otherwise: the cpu backend (no default), or a device
 * backend that cannot be opened here (`note`, when given, says why; a run then fails where it opens the backend).
 * Collective over world when world is given. Returns 0, or -1 with a message (the collective failed). */
int guard_device_memory(Recipe* r, Comm* world, char* note, size_t note_len, char* err, size_t err_len);

/* Cores this process may run on (sched_getaffinity; sysconf when that fails). */
int guard_cores(void);
/* Threads per rank: runtime.threads, or the cores available shared by the ranks of `world` on this
 * host. Warns (stderr) when runtime.threads asks for more than the cores available. Collective over
 * world. Can't fail. */
int guard_threads(const Recipe* r, Comm* world);
/* The loader's decode threads: data.workers, or for data.workers = 0 the cores this rank's share of the host
 * leaves beside the step (on the CPU backend its runtime.threads; on a device one host thread), at least 1 and
 * at most GUARD_DATA_WORKERS_MAX. The share counts the ranks on this host as guard_threads found them (before
 * it: one). */
#define GUARD_DATA_WORKERS_MAX 8
int guard_data_workers(const Recipe* r);

#endif
