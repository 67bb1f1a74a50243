/* rrfp.h — the runtime's front door: the RRFP pipeline scheduler (tasks, hints, dispatcher,
 * validity checks, simulator) and the Chrome trace writer/reader. Other runtime parts (transports,
 * trainer) add their declarations here or in headers included from here. */
#ifndef RRFP_RRFP_H
#define RRFP_RRFP_H

#include "runtime/sched.h"
#include "runtime/trace.h"

#endif
