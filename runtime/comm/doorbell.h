/* doorbell.h — wake a waiting rank on the same machine when a message is sent to it.
 *
 * MPI over shared memory completes a receive only when the receiver polls, and a rank that sleeps
 * between polls (so that oversubscribed ranks never spin the cores) notices a message only at its next
 * poll: with the transport's back-off of up to 2 ms plus a loaded machine's wake-up lateness, that was
 * milliseconds per pipeline hop (bench/README.md, Replay). A doorbell is one datagram socket per rank of
 * a group, in Linux's abstract namespace (nothing is left in the file system): a sender rings the
 * receiver's after posting a message, and a waiting rank blocks in ppoll on its own with the poll
 * interval as the timeout, so the kernel wakes it when a message is on its way. A ring carries nothing
 * and may be lost (a full queue, a peer on another machine whose socket is not here): it only shortens
 * a wait, and the bounded poll interval still finds every message. */
#ifndef RRFP_DOORBELL_H
#define RRFP_DOORBELL_H

#include "runtime/comm/comm.h"

typedef struct Doorbell Doorbell;

/* Collective over `comm` (rank 0's name for the group is broadcast: its pid and a counter, unique on the
 * machine while it lives). Returns NULL when doorbells are off or cannot be had: a group of one, a
 * device group (comm->device_memory), RRFP_DOORBELL=0 in the environment (the bench compares), or no
 * socket. NULL is not an error: doorbell_wait(NULL, ...) then sleeps its whole timeout. */
Doorbell* doorbell_create(Comm* comm);
/* Ring `peer`'s doorbell (non-blocking; a failure is ignored). d NULL: nothing. */
void doorbell_ring(Doorbell* d, int peer);
/* Sleep until a ring arrives or timeout_s (> 0) has passed, then take every ring waiting. Returns the
 * number of rings taken (0: the timeout). d NULL: sleeps timeout_s and returns 0. */
int doorbell_wait(Doorbell* d, double timeout_s);
void doorbell_free(Doorbell* d);

#endif
