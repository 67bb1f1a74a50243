/* emu.cpp — the CPU emulation of the CUDA runtime / cuBLAS slice declared in cuda_emu.h.
 *
 * Device memory is host memory with NaN guard zones; a launch runs its blocks in order, the threads
 * of a block as ucontext fibers on this OS thread. A fiber runs until it reaches __syncthreads or a
 * warp shuffle (or returns); when no fiber can run, the scheduler releases every warp whose live
 * lanes all wait at a shuffle, else the block barrier if every live thread waits there, else it
 * reports a deadlock (a divergent barrier). Runnable fibers are resumed in a pseudo-random order
 * each round, so code that reads another thread's shared-memory write without a barrier in between
 * sees stale (or NaN) data in some order. A fiber is started once, runs thread after thread (fiber_entry), and is
 * switched by emu_switch: on x86-64 six pushes, a stack swap and six pops (the callee-saved registers; everything
 * else is saved by the caller, as for any call); elsewhere makecontext / setcontext to start and _setjmp / _longjmp
 * to switch (glibc's _longjmp runs its unwinding checks on every switch: a sixth of an emulated step's time;
 * swapcontext makes a system call per switch, 10x slower still). Errors are sticky, as on a GPU: the first one is printed
 * with the kernel's name, and every later runtime call returns it. */
#undef _FORTIFY_SOURCE /* __longjmp_chk would refuse to jump between fiber stacks */
#include <cblas.h>
#include <setjmp.h>
#include <stdarg.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <deque>
#include <map>
#include <memory>
#include <time.h>
#include <string>
#include <vector>

#include "cuda_emu.h"
#include "engine/cuda/kernel_math.h" /* rr_gelu_tanh: the GELU epilogue */

dim3 threadIdx, blockIdx, blockDim, gridDim;

static EmuStats stats;
static cudaError_t sticky = cudaSuccess;

/* Device operations accepted so far, by what a GPU would launch (emu_op_counts, cuda_emu.h): counted at the
 * call, once each, whatever RR_EMU_ORDERS / RR_EMU_COMPUTE_DELAY do with the running */
static long op_counts[EMU_OPS];
extern "C" void emu_op_counts(long* out) {
    for (int i = 0; i < EMU_OPS; i++) out[i] = op_counts[i];
}

/* FLOPs of the cuBLAS(Lt) products run so far, 2 m n k each (emu_blas_flops, cuda_emu.h): counted when a product
 * runs, so a graph's products count at every replay */
static long long blas_flops;
static void blas_flops_add(uint64_t m, uint64_t n, uint64_t k) { __atomic_add_fetch(&blas_flops, (long long)(2 * m * n * k), __ATOMIC_RELAXED); }
extern "C" long long emu_blas_flops(void) { return __atomic_load_n(&blas_flops, __ATOMIC_RELAXED); }

/* ---- graphs: the stream being captured and what it recorded (cuda_emu.h) ---- */
struct EmuStream;
struct EmuGraph {
    std::vector<std::function<void()>> nodes;
};
static EmuStream* capture_stream; /* NULL: no capture */
static EmuGraph* capture_graph;
static EmuStream* S(cudaStream_t s);
static int capturing(cudaStream_t st) { return capture_stream && S(st) == capture_stream; }
static int capture_any(void) { return capture_stream != NULL; }
/* an operation on the captured stream: recorded, not run (1) */
static int capture_add(cudaStream_t st, const std::function<void()>& run) {
    if (!capturing(st)) return 0;
    capture_graph->nodes.push_back(run);
    return 1;
}
static void emu_fail(cudaError_t err, const char* fmt, ...);
/* an API call a capture may not contain (cuda_emu.h) */
static int capture_refuse(const char* what) {
    if (!capture_any()) return 0;
    emu_fail(cudaErrorInvalidValue, "%s during a stream capture (a GPU refuses it, or the host would read a value the graph has not made yet)", what);
    return 1;
}

static void emu_fail(cudaError_t err, const char* fmt, ...) {
    if (sticky != cudaSuccess) return; /* the first error is the one that matters */
    sticky = err;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cuda-emu: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

/* ---- memory --------------------------------------------------------------------------------------- */

/* Guard zones: 256 bytes on each side of every allocation, filled with NaN so that a stray read
 * poisons a result. A stray write is found when it changes a guard's bits, which `x += 0` does not
 * do to a NaN: with RR_EMU_GUARD=negzero the guards hold -0.0f instead, which any add changes
 * (-0 + 0 = +0), and ctest runs the matrix once in each mode. Fresh allocations are NaN either way. */
#define EMU_GUARD 256
static const uint32_t NAN_BITS = 0x7fc00000u;
static uint32_t guard_bits(void) {
    static int mode = -1;
    if (mode < 0) {
        const char* e = getenv("RR_EMU_GUARD");
        mode = (e && !strcmp(e, "negzero")) ? 1 : 0;
    }
    return mode ? 0x80000000u : NAN_BITS;
}

struct Alloc {
    size_t bytes;
    size_t mapped; /* the whole mapping: guards included, rounded up to pages */
    std::vector<unsigned char> pages; /* traffic: per page of the mapping, 1 read / 2 written in this operation */
};
static std::map<uintptr_t, Alloc> allocs; /* user pointer -> size */

/* Device memory is host memory here, so host code that reads or writes it directly (a GPU would
 * crash) would pass unnoticed. Every allocation is therefore its own mapping, PROT_NONE whenever
 * control is in host code, opened only while an emulated device operation (a launch, a copy, a
 * memset, a cuBLAS call) runs; a host access faults, and the handler names the allocation and
 * prints a backtrace. RR_EMU_PROTECT=0 turns this off.
 * How it is closed: where the CPU and kernel have memory protection keys (x86 PKU), every allocation is
 * tagged with one key at cudaMalloc and opening or closing device memory is one write of this thread's
 * PKRU register (pkey_set), the same cost whatever the number of allocations; elsewhere, or with
 * RR_EMU_PKEY=0, each allocation's mapping is mprotect'ed on every open and close (two system calls and a
 * TLB flush per allocation per device operation: a third of an emulated training step's time). The
 * emulator runs every device operation on the calling thread, and a key opened on one thread stays
 * closed on the others, as the host is closed on a GPU. */
static int protect_on = -1;
static int emu_pkey = -1; /* >= 0: the protection key every allocation carries */
static int device_depth; /* nesting of DeviceOpen */

static unsigned char* alloc_base(uintptr_t user) { return (unsigned char*)user - EMU_GUARD; }
/* every allocation's pages (the mprotect path's open and close; the traffic count's closing and reopening) */
static void pages_all(int prot) {
    for (auto& kv : allocs) mprotect(alloc_base(kv.first), kv.second.mapped, prot);
}
/* open (1) or close (0) device memory to host code on this thread */
static void device_access(int open) {
    if (emu_pkey >= 0)
        pkey_set(emu_pkey, open ? 0 : PKEY_DISABLE_ACCESS);
    else
        pages_all(open ? PROT_READ | PROT_WRITE : PROT_NONE);
}

/* Traffic (emu_traffic, tests/engine/cuda/test_traffic.c): while on, a named device operation (a launch, a memset or
 * copy, a cuBLAS / cuBLASLt product) runs with device memory closed, and the SIGSEGV handler opens each
 * page it touches, read-only on a load (counted read) and read-write on a store (counted written), so
 * every page the operation really touched is known; its bytes are those pages within the allocation. */
static int traffic_on, traffic_active;
static const char* traffic_op;
static int traffic_kind = -1;
static std::vector<EmuTraffic> traffic_log;
static size_t page_size(void) {
    static size_t p = 0;
    if (!p) p = (size_t)sysconf(_SC_PAGESIZE);
    return p;
}
void emu_traffic_label(const char* op, int kind) {
    traffic_op = op;
    traffic_kind = kind;
}
extern "C" void emu_traffic(int on) {
    traffic_on = on;
    if (on) traffic_log.clear();
}
extern "C" size_t emu_traffic_n(void) { return traffic_log.size(); }
extern "C" const EmuTraffic* emu_traffic_at(size_t i) { return i < traffic_log.size() ? &traffic_log[i] : NULL; }
static void traffic_begin(void) {
    for (auto& kv : allocs) {
        kv.second.pages.assign(kv.second.mapped / page_size(), 0);
        mprotect(alloc_base(kv.first), kv.second.mapped, PROT_NONE);
    }
    if (emu_pkey >= 0) pkey_set(emu_pkey, 0); /* the pages' protection counts; the key is open */
    traffic_active = 1;
}
static void traffic_end(const char* what) {
    traffic_active = 0;
    EmuTraffic t = {traffic_op ? traffic_op : "(no op)", traffic_kind, what, 0, 0};
    size_t pg = page_size();
    for (auto& kv : allocs) {
        uintptr_t base = (uintptr_t)alloc_base(kv.first), u0 = kv.first, u1 = kv.first + kv.second.bytes;
        for (size_t i = 0; i < kv.second.pages.size(); i++) {
            unsigned char f = kv.second.pages[i];
            if (!f) continue;
            uintptr_t p0 = base + i * pg, p1 = p0 + pg;
            uintptr_t a = p0 > u0 ? p0 : u0, b = p1 < u1 ? p1 : u1;
            size_t n = b > a ? (size_t)(b - a) : 0;
            if (f & 1) t.read += n;
            if (f & 2) t.written += n;
        }
    }
    traffic_log.push_back(t);
    pages_all(PROT_READ | PROT_WRITE); /* the rest of the operation's scope (guard checks) is not counted */
}
struct DeviceOpen { /* scope of an emulated device operation; `what` names one whose traffic is counted */
    const char* what;
    DeviceOpen(const char* w = NULL) : what(NULL) {
        if (!protect_on) return;
        if (device_depth++ == 0) {
            if (w && traffic_on) {
                what = w;
                traffic_begin();
            } else {
                device_access(1);
            }
        }
    }
    void finish(void) { /* the counted part is over */
        if (what) traffic_end(what);
        what = NULL;
    }
    ~DeviceOpen() {
        if (!protect_on) return;
        finish();
        if (--device_depth == 0) device_access(0);
    }
};

static void segv_handler(int sig, siginfo_t* si, void* uctx) {
    uintptr_t a = (uintptr_t)si->si_addr;
    if (traffic_active) { /* a counted operation's first touch of a page: note it, open the page, go on */
        auto it = allocs.upper_bound(a + EMU_GUARD);
        if (it != allocs.begin()) {
            --it;
            uintptr_t base = (uintptr_t)alloc_base(it->first);
            if (a >= base && a < base + it->second.mapped) {
#if defined(__x86_64__)
                int w = (((ucontext_t*)uctx)->uc_mcontext.gregs[REG_ERR] & 2) != 0;
#else
                int w = 1; /* no fault kind: count both */
                it->second.pages[(a - base) / page_size()] |= 1;
#endif
                size_t i = (a - base) / page_size();
                it->second.pages[i] |= w ? 2 : 1;
                mprotect((void*)(base + i * page_size()), page_size(), w ? PROT_READ | PROT_WRITE : PROT_READ);
                return;
            }
        }
    }
    (void)uctx;
    for (auto& kv : allocs) {
        uintptr_t base = (uintptr_t)alloc_base(kv.first);
        if (a >= base && a < base + kv.second.mapped) {
            char msg[256];
            int n = snprintf(msg, sizeof msg,
                             "cuda-emu: host code touched device memory: byte %ld of a %zu-byte cudaMalloc allocation "
                             "(on a GPU this is a crash); host backtrace:\n",
                             (long)(a - kv.first), kv.second.bytes);
            if (write(2, msg, (size_t)n) < 0) {}
            void* frames[32];
            backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
            _exit(3);
        }
    }
    signal(sig, SIG_DFL); /* not ours: the ordinary crash */
    raise(sig);
}

static void protect_init(void) {
    if (protect_on >= 0) return;
    const char* e = getenv("RR_EMU_PROTECT");
    protect_on = !(e && !strcmp(e, "0"));
    if (protect_on) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = segv_handler;
        sa.sa_flags = SA_SIGINFO;
        sigaction(SIGSEGV, &sa, NULL);
        const char* k = getenv("RR_EMU_PKEY");
        if (!(k && !strcmp(k, "0"))) emu_pkey = pkey_alloc(0, PKEY_DISABLE_ACCESS); /* -1: no keys here */
    }
}
/* which mechanism closes device memory (the protection test names it): "pkey", "mprotect" or "off" */
extern "C" const char* emu_protect_mode(void) {
    protect_init();
    return !protect_on ? "off" : emu_pkey >= 0 ? "pkey" : "mprotect";
}

/* byte i of a fill is byte i % 4 of `bits` (least significant first), written a 4-byte word at a time (a block's
 * shared memory is filled at every block: byte by byte it was a tenth of an emulated flash-attention launch) */
static void fill_bits(void* p, size_t bytes, uint32_t bits) {
    unsigned char* b = (unsigned char*)p;
    const unsigned char pat[4] = {(unsigned char)bits, (unsigned char)(bits >> 8), (unsigned char)(bits >> 16),
                                  (unsigned char)(bits >> 24)};
    uint32_t w;
    memcpy(&w, pat, 4);
    size_t i = 0;
    for (; i + 4 <= bytes; i += 4) memcpy(b + i, &w, 4);
    for (; i < bytes; i++) b[i] = pat[i % 4];
}
static void fill_nan(void* p, size_t bytes) { fill_bits(p, bytes, NAN_BITS); }
static void fill_guard(void* p, size_t bytes) { fill_bits(p, bytes, guard_bits()); }
static int guard_intact(const void* p, size_t bytes) {
    const unsigned char* b = (const unsigned char*)p;
    uint32_t bits = guard_bits();
    const unsigned char pat[4] = {(unsigned char)bits, (unsigned char)(bits >> 8), (unsigned char)(bits >> 16),
                                  (unsigned char)(bits >> 24)};
    uint32_t w, x;
    memcpy(&w, pat, 4);
    size_t i = 0;
    for (; i + 4 <= bytes; i += 4) {
        memcpy(&x, b + i, 4);
        if (x != w) return 0;
    }
    for (; i < bytes; i++)
        if (b[i] != pat[i % 4]) return 0;
    return 1;
}

/* Is [p, p + bytes) inside one allocation? */
static int in_alloc(const void* p, size_t bytes) {
    uintptr_t a = (uintptr_t)p;
    auto it = allocs.upper_bound(a);
    if (it == allocs.begin()) return 0;
    --it;
    return a >= it->first && a + bytes <= it->first + it->second.bytes;
}

static void check_guards(const char* after) {
    for (auto& kv : allocs) {
        unsigned char* user = (unsigned char*)kv.first;
        if (!guard_intact(user - EMU_GUARD, EMU_GUARD))
            emu_fail(cudaErrorIllegalAddress, "%s wrote before the start of a %zu-byte allocation", after, kv.second.bytes);
        if (!guard_intact(user + kv.second.bytes, EMU_GUARD))
            emu_fail(cudaErrorIllegalAddress, "%s wrote past the end of a %zu-byte allocation", after, kv.second.bytes);
    }
}

int emu_is_device_ptr(const void* p) { return in_alloc(p, 0); }
void emu_bad_arg(const char* kernel, int index) {
    emu_fail(cudaErrorIllegalAddress, "%s: pointer argument %d is not device memory (a host pointer?)", kernel, index);
}

static long malloc_calls;
extern "C" long emu_malloc_count(void) { return malloc_calls; }
/* The emulated device's memory: RR_EMU_DEVICE_MB MiB (tests of what depends on the device's size: the default
 * memory budget, out-of-memory), 16 GiB when unset. cudaMemGetInfo reports it, and cudaMalloc past it fails as on a
 * device (cudaErrorMemoryAllocation, not sticky). */
static size_t emu_bytes_in_use;
static size_t emu_device_total(void) {
    static size_t total = 0;
    if (!total) {
        const char* e = getenv("RR_EMU_DEVICE_MB");
        double mb = e && *e ? atof(e) : 0;
        total = mb > 0 ? (size_t)(mb * 1048576.0) : (size_t)16 << 30;
    }
    return total;
}
cudaError_t emu_malloc(void** p, size_t bytes) {
    if (sticky) return sticky;
    if (capture_refuse("cudaMalloc")) return sticky;
    if (bytes > emu_device_total() - emu_bytes_in_use) {
        *p = NULL;
        return cudaErrorMemoryAllocation;
    }
    malloc_calls++;
    protect_init();
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t mapped = (bytes + 2 * EMU_GUARD + page - 1) / page * page;
    void* m = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return cudaErrorMemoryAllocation;
    unsigned char* base = (unsigned char*)m;
    fill_guard(base, EMU_GUARD);
    fill_nan(base + EMU_GUARD, bytes); /* fresh device memory is garbage: make it NaN */
    fill_guard(base + EMU_GUARD + bytes, mapped - EMU_GUARD - bytes);
    *p = base + EMU_GUARD;
    allocs[(uintptr_t)*p] = Alloc{bytes, mapped};
    emu_bytes_in_use += bytes;
    if (emu_pkey >= 0)
        pkey_mprotect(base, mapped, PROT_READ | PROT_WRITE, emu_pkey); /* closed or open as the key is */
    else if (protect_on && device_depth == 0)
        mprotect(base, mapped, PROT_NONE);
    return cudaSuccess;
}

struct EmuStream;
static void drain(EmuStream* s); /* below: s NULL waits for every stream */
/* cudaFree and cudaFreeHost synchronise the device on a GPU, so every operation enqueued on any stream
 * completes first, communication included. (Before, a bounded number of polls ran and what had not run
 * was left: a data-parallel replica that writes no checkpoint freed its parameters while the last
 * step's AdamW kernels were still queued, and the kernel crashed at exit, train_nccl_emu_dp2.) */
static void sync_device(void) { drain(NULL); }

cudaError_t cudaFree(void* p) {
    if (sticky) return sticky;
    if (!p) return cudaSuccess;
    if (capture_refuse("cudaFree")) return sticky;
    sync_device(); /* a queued kernel may still write here */
    auto it = allocs.find((uintptr_t)p);
    if (it == allocs.end()) {
        emu_fail(cudaErrorInvalidValue, "cudaFree of a pointer that cudaMalloc did not return");
        return sticky;
    }
    DeviceOpen open;
    check_guards("a kernel or copy before cudaFree");
    size_t mapped = it->second.mapped;
    emu_bytes_in_use -= it->second.bytes;
    allocs.erase(it);
    munmap((unsigned char*)p - EMU_GUARD, mapped);
    return sticky;
}

/* ---- streams --------------------------------------------------------------------------------------- */

struct EmuStream {
    int id;
    std::deque<std::function<int()>> q; /* pending operations, in order (see cuda_emu.h) */
    long enq, done;                     /* operations enqueued / completed on this stream so far */
};
static EmuStream default_stream = {0, {}, 0, 0};
static std::vector<EmuStream*> live_streams;
static EmuStream* S(cudaStream_t s) { return s ? s : &default_stream; }
static int streams_made = 0;
static int require_on = 0;
static cudaStream_t required = NULL;
static int stream_id(cudaStream_t s) { return s ? s->id : 0; }
extern "C" void emu_require_stream(cudaStream_t s) {
    require_on = s != NULL;
    required = s;
}
/* `what` (a kernel's name or an API call) was enqueued on `s`: an error when a test requires another */
static void emu_on_stream(cudaStream_t s, const char* what) {
    if (require_on && s != required)
        emu_fail(cudaErrorInvalidValue, "%s ran on stream %d, not on the table's stream %d", what, stream_id(s),
                 stream_id(required));
}
static int progress_stream(EmuStream* s) {
    int moved = 0;
    while (!s->q.empty()) {
        std::function<int()> f = s->q.front();
        if (!f()) break;
        s->q.pop_front();
        s->done++;
        moved = 1;
    }
    return moved;
}
static long poll_epoch;
long emu_poll_epoch(void) { return poll_epoch; }
void emu_progress(void) {
    for (int again = 1; again;) {
        again = progress_stream(&default_stream);
        for (size_t i = 0; i < live_streams.size(); i++) again |= progress_stream(live_streams[i]);
    }
}
void emu_stream_enqueue(cudaStream_t st, std::function<int()> step) {
    EmuStream* s = S(st);
    s->enq++;
    s->q.push_back(step);
    emu_progress();
}
static int compute_delay(void);
static int device_idle(void) {
    if (!default_stream.q.empty()) return 0;
    for (size_t i = 0; i < live_streams.size(); i++)
        if (!live_streams[i]->q.empty()) return 0;
    return 1;
}
static long device_done(void) {
    long n = default_stream.done;
    for (size_t i = 0; i < live_streams.size(); i++) n += live_streams[i]->done;
    return n;
}
/* Until s (NULL: every stream) has nothing pending. Polls on without sleeping while work runs (deferred
 * kernels wait for polls, RR_EMU_COMPUTE_DELAY); once nothing has moved for a while, sleeps between
 * polls with back-off (what is left waits for a message from another process). */
static void drain(EmuStream* s) {
    long ns = 20000, last = -1;
    int still = 0;
    double waited = 0, warn = 60;
    for (;;) {
        emu_progress();
        if (s ? s->q.empty() : device_idle()) return;
        poll_epoch++;
        long now = device_done();
        if (now != last) {
            last = now, still = 0, ns = 20000;
            continue;
        }
        if (++still <= 4 * compute_delay() + 8) continue;
        struct timespec ts = {0, ns};
        nanosleep(&ts, NULL);
        waited += ns * 1e-9;
        if (ns < 1000000) ns *= 2;
        if (waited > warn) {
            if (s)
                fprintf(stderr, "cuda-emu: stream %d has waited %.0f s for pending communication (a lost peer?)\n",
                        s->id, waited);
            else
                fprintf(stderr, "cuda-emu: cudaFree has waited %.0f s for pending device work (a lost peer?)\n",
                        waited);
            warn += 60;
        }
    }
}
/* An operation that runs now on s: first whatever is pending there (a real stream would queue it). */
static void run_now(cudaStream_t st) {
    EmuStream* s = S(st);
    if (!s->q.empty()) drain(s);
    s->enq++;
    s->done++;
}

/* RR_EMU_COMPUTE_DELAY=N (N > 0): device work (kernel launches, cuBLAS and cuBLASLt calls, memsets and
 * copies) does not run when it is called but is enqueued on its stream, and once it reaches the head of
 * the stream it waits a pseudo-random N .. 2N further polls (emu_poll_epoch) before it runs, as a GPU
 * finishes a kernel some time after the host launched it. Work on the same stream stays in order, the
 * host's synchronisations (cudaStreamSynchronize, a copy to the host, cudaEventSynchronize) wait for
 * it, and an event recorded after it completes only once it has run; but work on another stream that
 * does not wait for its event (cudaStreamWaitEvent) runs before it and reads the buffer's previous
 * contents: a send that skips the wait for the producing task's event transmits stale data
 * (tests/runtime/comm/test_nccl_emu.c's control; tests/runtime/train/train_nccl_emu.sh). Launch configurations and pointer
 * arguments are still checked at the call; what a kernel does wrong is reported at the next call after
 * it ran. 0 (the default): everything runs at its call, as before. */
int emu_env_count(const char* name) {
    const char* e = getenv(name);
    int v = e ? atoi(e) : 0;
    return v > 0 ? v : 0;
}
static int compute_delay(void) {
    static int d = -1;
    if (d < 0) d = emu_env_count("RR_EMU_COMPUTE_DELAY");
    return d;
}
static void enqueue_compute(cudaStream_t st, std::function<void()> run) {
    int d = compute_delay();
    if (d) {
        static uint64_t x = 0x9E3779B97F4A7C15ull;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        d += (int)(x % (uint64_t)(d + 1));
    }
    auto since = std::make_shared<long>(-1);
    emu_stream_enqueue(st, [=] {
        if (*since < 0) *since = poll_epoch; /* at the head of its stream from now */
        if (poll_epoch - *since < d) return 0;
        run();
        return 1;
    });
}
cudaError_t cudaMemsetAsync(void* p, int v, size_t bytes, cudaStream_t stream) {
    emu_on_stream(stream, "cudaMemsetAsync");
    if (sticky) return sticky;
    if (!in_alloc(p, bytes)) {
        emu_fail(cudaErrorInvalidValue, "cudaMemset of %zu bytes outside any allocation", bytes);
        return sticky;
    }
    auto run = [=] {
        DeviceOpen open("cudaMemsetAsync");
        memset(p, v, bytes);
    };
    if (capture_add(stream, run)) return cudaSuccess;
    op_counts[EMU_OP_MEMSET]++;
    enqueue_compute(stream, run);
    return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int v, size_t bytes) { return cudaMemsetAsync(p, v, bytes, 0); }
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
    emu_on_stream(stream, "cudaMemcpyAsync");
    if (sticky) return sticky;
    int dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    int src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if ((dst_dev && !in_alloc(dst, bytes)) || (src_dev && !in_alloc(src, bytes))) {
        emu_fail(cudaErrorInvalidValue, "cudaMemcpy (kind %d) of %zu bytes: the device side is outside any allocation",
                 (int)kind, bytes);
        return sticky;
    }
    if (bytes && ((!dst_dev && in_alloc(dst, 0)) || (!src_dev && in_alloc(src, 0)))) {
        emu_fail(cudaErrorInvalidValue, "cudaMemcpy (kind %d) of %zu bytes: the host side is device memory", (int)kind,
                 bytes);
        return sticky;
    }
    if (capturing(stream)) {
        if (kind == cudaMemcpyDeviceToHost) {
            capture_refuse("cudaMemcpyAsync to the host");
            return sticky;
        }
        capture_add(stream, [=] { /* the host source is read at each replay */
            DeviceOpen open("cudaMemcpyAsync");
            memmove(dst, src, bytes);
        });
        return cudaSuccess;
    }
    op_counts[EMU_OP_COPY]++;
    EmuStream* s = S(stream);
    if ((s->q.empty() && !compute_delay()) || kind != cudaMemcpyHostToDevice) {
        /* behind pending work the copy waits its turn; a host source is read at the call (as pageable
         * memory is staged by the driver), so only a copy into the host can be deferred */
        enqueue_compute(stream, [=] {
            DeviceOpen open("cudaMemcpyAsync");
            memmove(dst, src, bytes);
        });
    } else {
        std::vector<unsigned char> copy((const unsigned char*)src, (const unsigned char*)src + bytes);
        enqueue_compute(stream, [=] {
            DeviceOpen open("cudaMemcpyAsync");
            memmove(dst, copy.data(), bytes);
        });
    }
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    emu_on_stream(s, "cudaStreamSynchronize");
    if (capturing(s) && capture_refuse("cudaStreamSynchronize of the captured stream")) return sticky;
    drain(S(s));
    DeviceOpen open;
    check_guards("a kernel");
    return sticky;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
    *s = new EmuStream{++streams_made, {}, 0, 0};
    live_streams.push_back(*s);
    return sticky;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (!s) {
        emu_fail(cudaErrorInvalidValue, "cudaStreamDestroy of the default stream");
        return sticky;
    }
    if (require_on && s == required) require_on = 0, required = NULL;
    drain(s);
    for (size_t i = 0; i < live_streams.size(); i++)
        if (live_streams[i] == s) live_streams.erase(live_streams.begin() + (long)i);
    delete s;
    return sticky;
}
cudaError_t cudaGetDeviceCount(int* n) {
    *n = 1;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int) { return sticky; }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CPU emulation (tests/support/cuda_emu)");
    p->major = 9, p->minor = 0;
    return cudaSuccess;
}
cudaError_t cudaGetLastError(void) { return sticky; }

const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    default: return "cudaError(other)";
    }
}
const char* cudaGetErrorString(cudaError_t e) { return cudaGetErrorName(e); }

/* ---- fibers ------------------------------------------------------------------------------------- */

enum { F_RUN, F_BARRIER, F_SHUFFLE, F_DONE };
#define EMU_STACK (128 * 1024)
/* Fiber stacks lie EMU_STACK_STRIDE apart: 2 KiB + 64 bytes more than a stack, so that their tops (where each fiber's
 * live frames are) fall on different sets of the L1 (4 KiB a way) and the L2 (64 KiB a way) caches, every 64 KiB
 * over. At a stride of a power of two they all shared the sets of an 8 KiB window (when a fiber was coloured by 64
 * bytes): the L2 could keep a few of the 128 stacks of a flash-attention block, and every switch waited on memory. */
#define EMU_STACK_STRIDE (EMU_STACK + 2048 + 64)

struct Fiber {
#if defined(__x86_64__)
    void* sp;       /* where it yielded: its stack pointer, the callee-saved registers pushed below it */
#else
    ucontext_t ctx; /* the start */
    jmp_buf jb;     /* where it yielded */
#endif
    int started;
    char* stack;
    int state;
    dim3 tid;
    int linear;
    unsigned mask; /* of the shuffle it waits at */
};
struct Warp {
    uint32_t mma[2][32][10]; /* emu_mma_m16n8k16_bf16: each lane's a[4], b[2], c[4] (f32 bits) */
    uint64_t slot[2][32];
    unsigned slot_gen[2][32];
    unsigned gen;
    /* emu_mma_m16n8k16_bf16's result D for the whole warp, computed once per warp-wide mma by the first
     * lane to resume after the exchange (mma_ready_gen[buf]: the generation it holds), and emu_ldmatrix_x4's
     * check of every lane's row address, done once per generation too (ldm_ready_gen) */
    float mma_d[2][16][8];
    unsigned mma_ready_gen[2], ldm_ready_gen[2];
};

static std::vector<Fiber> fibers;
static std::vector<Warp> warps;
#if defined(__x86_64__)
static void* sched_sp; /* the scheduler's stack pointer while a fiber runs */
/* emu_switch(save, load): push the callee-saved registers, store the stack pointer in *save, load `load`,
 * pop the registers saved there and return into that context (a fiber's yield, the scheduler's resume, or
 * a new fiber's first frame: fiber_resume) */
extern "C" void rr_emu_switch(void** save, void* load);
asm(".text\n"
    ".globl rr_emu_switch\n"
    ".hidden rr_emu_switch\n"
    ".type rr_emu_switch,@function\n"
    "rr_emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size rr_emu_switch, .-rr_emu_switch\n");
/* a fiber stops (a yield, its thread's end): on to the next fiber of the round (fiber_next, below) */
#define EMU_TO_SCHED() fiber_next()
#else
static jmp_buf sched_jb;
#define EMU_TO_SCHED() \
    do { \
        if (!_setjmp(cur->jb)) _longjmp(sched_jb, 1); \
    } while (0)
#endif
static Fiber* cur;
static const std::function<void()>* cur_body;
static const char* cur_kernel = "?";
static std::vector<unsigned char> dyn_smem;
static size_t dyn_smem_bytes;
static std::map<std::string, int> max_dyn_smem; /* cudaFuncAttributeMaxDynamicSharedMemorySize */
static uint64_t order_rng = 0x9E3779B97F4A7C15ull;
/* The order runnable fibers are resumed in: ORDER_RANDOM by default; with RR_EMU_ORDERS=2 every
 * launch runs twice, ORDER_ASCENDING then ORDER_DESCENDING (lowest / highest warp runs ahead, see
 * run_block; the second pass also takes the blocks in reverse) from the same memory, and any byte of output that differs means a thread read
 * another's write without a barrier in between (in one of the two orders the reader runs first). Launches that used atomicAdd may differ by round-off and
 * are not compared. */
enum { ORDER_RANDOM, ORDER_ASCENDING, ORDER_DESCENDING };
static int order_mode = ORDER_RANDOM;
static int atomics_used;

#if defined(__x86_64__)
/* The round being run (run_block): the fibers order[0 .. m) are resumed in that order, each switching straight to
 * the next when it stops and the last back to the scheduler, so a round of m fibers makes m + 1 switches, not 2 m
 * (most of an emulated tensor-core kernel's time was switches: every lane stops at every mma, ldmatrix and shuffle). */
static const int* round_order;
static int round_m, round_k;
static void fiber_entry(void);
static void fiber_frame(Fiber* f) {
    if (!f->started) { /* a first frame that emu_switch returns into fiber_entry from, the stack as after a call */
        f->started = 1;
        /* the stacks lie EMU_STACK_STRIDE apart: their tops on different cache sets */
        uintptr_t top = ((uintptr_t)f->stack + EMU_STACK) & ~(uintptr_t)15;
        void** sp = (void**)top;
        *--sp = NULL;                 /* fiber_entry's return address: it never returns */
        *--sp = (void*)&fiber_entry;  /* emu_switch's ret */
        for (int i = 0; i < 6; i++) *--sp = NULL; /* rbp rbx r12..r15 */
        f->sp = sp;
    }
}
/* the running fiber stops: the round's next fiber runs, or the scheduler after the last one (or at an error: the
 * block is abandoned, its other fibers never resumed) */
static void fiber_next(void) {
    Fiber* self = cur;
    if (!sticky && ++round_k < round_m) {
        Fiber* f = &fibers[round_order[round_k]];
        cur = f;
        threadIdx = f->tid;
        fiber_frame(f);
        rr_emu_switch(&self->sp, f->sp);
    } else {
        rr_emu_switch(&self->sp, sched_sp);
    }
}
#endif

/* A fiber runs one thread of a block, then waits (F_DONE) until the scheduler resumes it as a thread
 * of a later block: started once, not once per block (getcontext / setcontext are system calls,
 * and a training step launches hundreds of thousands of threads). */
static void fiber_entry(void) {
    for (;;) {
        (*cur_body)();
        cur->state = F_DONE;
        EMU_TO_SCHED();
        /* resumed for the next block: `cur` is this fiber again, with its new thread index */
    }
}

static void fiber_yield(int state) {
    cur->state = state;
    stats.switches++;
    EMU_TO_SCHED();
}

static void fiber_resume(Fiber* f) {
#if defined(__x86_64__)
    fiber_frame(f);
    rr_emu_switch(&sched_sp, f->sp); /* back here when the round's last fiber stops */
#else
    if (_setjmp(sched_jb)) return; /* the fiber yielded or finished */
    if (!f->started) {
        f->started = 1;
        getcontext(&f->ctx);
        f->ctx.uc_stack.ss_sp = f->stack;
        f->ctx.uc_stack.ss_size = EMU_STACK;
        f->ctx.uc_link = NULL;
        makecontext(&f->ctx, fiber_entry, 0);
        setcontext(&f->ctx);
    }
    _longjmp(f->jb, 1);
#endif
}

void __syncthreads(void) { fiber_yield(F_BARRIER); }
void __threadfence(void) {}
float atomicAdd(float* p, float v) { /* fibers share one OS thread: a plain update is atomic */
    atomics_used = 1;
    float old = *p;
    *p = old + v;
    return old;
}
int atomicCAS(int* p, int compare, int val) {
    int old = *p;
    if (old == compare) *p = val;
    return old;
}

uint64_t emu_shfl_bits(unsigned mask, uint64_t bits, int src_lane, int xor_mask) {
    Fiber* f = cur;
    int lane = f->linear % 32;
    Warp& w = warps[f->linear / 32];
    unsigned g = w.gen;
    int buf = g & 1; /* double buffer: a lane cannot deposit twice before everyone has read */
    w.slot[buf][lane] = bits;
    w.slot_gen[buf][lane] = g;
    f->mask = mask;
    fiber_yield(F_SHUFFLE);
    int s = src_lane >= 0 ? src_lane % 32 : (lane ^ xor_mask);
    if (s >= 32) s = lane;
    if (w.slot_gen[buf][s] != g) {
        emu_fail(cudaErrorLaunchFailure, "%s: block (%u,%u,%u) thread %d shuffled from lane %d, which did not take part",
                 cur_kernel, blockIdx.x, blockIdx.y, blockIdx.z, f->linear, s);
        return bits;
    }
    return w.slot[buf][s];
}

/* A warp-collective exchange as a shuffle's (the same generation and release), of each lane's fragments:
 * A (16 x 16) and B (16 x 8) in bf16 and the accumulator C = D (16 x 8) in f32. The first lane to resume
 * checks that the whole warp took part, gathers the fragments and computes all of D (each element summed
 * over k in ascending order, as one lane would); every lane then takes its own four elements. */
void emu_mma_m16n8k16_bf16(float* d, const uint32_t* a, const uint32_t* b) {
    Fiber* f = cur;
    int lane = f->linear % 32;
    Warp& w = warps[f->linear / 32];
    unsigned gen = w.gen;
    int buf = gen & 1;
    memcpy(w.mma[buf][lane], a, 4 * sizeof(uint32_t));
    memcpy(w.mma[buf][lane] + 4, b, 2 * sizeof(uint32_t));
    memcpy(w.mma[buf][lane] + 6, d, 4 * sizeof(float));
    w.slot_gen[buf][lane] = gen;
    f->mask = 0xffffffffu;
    fiber_yield(F_SHUFFLE);
    int g = lane >> 2, t = lane & 3;
    if (w.mma_ready_gen[buf] != gen) {
        for (int l = 0; l < 32; l++)
            if (w.slot_gen[buf][l] != gen) {
                emu_fail(cudaErrorLaunchFailure, "%s: block (%u,%u,%u) thread %d: mma.sync without lane %d of its warp",
                         cur_kernel, blockIdx.x, blockIdx.y, blockIdx.z, f->linear, l);
                return;
            }
        /* A and B in one static scratch, not on the computing lane's stack: that stack is another fiber's at each
         * mma, whose lines are not in the cache (a fifth of the mma's time went to the first stores) */
        static float A[16][16], B[16][8];
        float(&D)[16][8] = w.mma_d[buf];
        for (int l = 0; l < 32; l++) { /* each lane's fragments to their places (the layout above) */
            const uint32_t* fr = w.mma[buf][l];
            int lg = l >> 2, lt = l & 3;
            for (int r = 0; r < 4; r++) { /* a[r] = A[g + 8 (r & 1)][2t + 8 (r >> 1), + 1] */
                float* ap = &A[lg + 8 * (r & 1)][2 * lt + 8 * (r >> 1)];
                ap[0] = rr_bf16_to_f32((uint16_t)(fr[r] & 0xffffu));
                ap[1] = rr_bf16_to_f32((uint16_t)(fr[r] >> 16));
            }
            for (int r = 0; r < 2; r++) { /* b[r] = B[2t + 8 r, + 1][g] */
                B[2 * lt + 8 * r][lg] = rr_bf16_to_f32((uint16_t)(fr[4 + r] & 0xffffu));
                B[2 * lt + 8 * r + 1][lg] = rr_bf16_to_f32((uint16_t)(fr[4 + r] >> 16));
            }
            /* c[0..1] = C[g][2t, 2t + 1], c[2..3] = C[g + 8][2t, 2t + 1] */
            memcpy(&D[lg][2 * lt], fr + 6, 2 * sizeof(float));
            memcpy(&D[lg + 8][2 * lt], fr + 8, 2 * sizeof(float));
        }
        for (int row = 0; row < 16; row++) { /* a row of D in registers while k runs */
#if defined(__SSE2__)
            /* the same products and sums as the loop below, rounded one by one (mulps, then addps: never fused),
             * with the row's 8 sums in two registers (the compiler kept the array on the stack: a store and a
             * reload per k, a fifth of an emulated attention step's time) */
            __m128 lo = _mm_loadu_ps(D[row]), hi = _mm_loadu_ps(D[row] + 4);
            for (int kk = 0; kk < 16; kk++) {
                __m128 a = _mm_set1_ps(A[row][kk]);
                lo = _mm_add_ps(lo, _mm_mul_ps(a, _mm_loadu_ps(B[kk])));
                hi = _mm_add_ps(hi, _mm_mul_ps(a, _mm_loadu_ps(B[kk] + 4)));
            }
            _mm_storeu_ps(D[row], lo);
            _mm_storeu_ps(D[row] + 4, hi);
#else
            float acc[8];
            memcpy(acc, D[row], sizeof acc);
            for (int kk = 0; kk < 16; kk++)
                for (int col = 0; col < 8; col++) acc[col] += A[row][kk] * B[kk][col];
            memcpy(D[row], acc, sizeof acc);
#endif
        }
        w.mma_ready_gen[buf] = gen;
    }
    for (int i = 0; i < 4; i++) d[i] = w.mma_d[buf][g + 8 * (i >> 1)][2 * t + (i & 1)];
}

void emu_ldmatrix_x4(uint32_t* r, const void* row, int trans) {
    Fiber* f = cur;
    int lane = f->linear % 32;
    Warp& w = warps[f->linear / 32];
    unsigned gen = w.gen;
    int buf = gen & 1;
    uintptr_t a = (uintptr_t)row;
    memcpy(w.mma[buf][lane], &a, sizeof a);
    w.slot_gen[buf][lane] = gen;
    f->mask = 0xffffffffu;
    fiber_yield(F_SHUFFLE);
    uintptr_t lo = (uintptr_t)(dyn_smem.data() + EMU_GUARD), hi = lo + dyn_smem_bytes;
    for (int l = 0; l < 32 && w.ldm_ready_gen[buf] != gen; l++) {
        if (w.slot_gen[buf][l] != gen) {
            emu_fail(cudaErrorLaunchFailure, "%s: block (%u,%u,%u) thread %d: ldmatrix without lane %d of its warp",
                     cur_kernel, blockIdx.x, blockIdx.y, blockIdx.z, f->linear, l);
            return;
        }
        uintptr_t p;
        memcpy(&p, w.mma[buf][l], sizeof p);
        if (p % 16 || p < lo || p + 16 > hi) {
            emu_fail(cudaErrorIllegalAddress, "%s: block (%u,%u,%u) lane %d: ldmatrix row address %s",
                     cur_kernel, blockIdx.x, blockIdx.y, blockIdx.z, l, p % 16 ? "not 16-byte aligned"
                                                                                : "outside dynamic shared memory");
            return;
        }
    }
    w.ldm_ready_gen[buf] = gen;
    for (int i = 0; i < 4; i++) {
        uint16_t e[2];
        for (int h = 0; h < 2; h++) {
            int mrow = trans ? 2 * (lane % 4) + h : lane / 4, mcol = trans ? lane / 4 : 2 * (lane % 4) + h;
            uintptr_t p;
            memcpy(&p, w.mma[buf][8 * i + mrow], sizeof p);
            memcpy(&e[h], (const void*)(p + 2 * mcol), 2);
        }
        r[i] = (uint32_t)e[0] | ((uint32_t)e[1] << 16);
    }
}

void emu_cp_async16(void* dst, const void* src, int bytes) {
    uintptr_t lo = (uintptr_t)(dyn_smem.data() + EMU_GUARD), hi = lo + dyn_smem_bytes, a = (uintptr_t)dst;
    if (a % 16 || a < lo || a + 16 > hi || (bytes != 0 && bytes != 16) || (bytes && !in_alloc(src, (size_t)bytes))) {
        emu_fail(cudaErrorIllegalAddress, "%s: block (%u,%u,%u) thread %d: cp.async of %d bytes to %s from %s", cur_kernel,
                 blockIdx.x, blockIdx.y, blockIdx.z, cur ? cur->linear : -1, bytes,
                 a % 16 ? "a misaligned address" : (a < lo || a + 16 > hi) ? "outside shared memory" : "shared memory",
                 bytes && !in_alloc(src, (size_t)bytes) ? "outside any allocation" : "device memory");
        return;
    }
    memset(dst, 0, 16);
    if (bytes) memcpy(dst, src, (size_t)bytes);
}

void* emu_dynamic_smem(void) { return dyn_smem.data() + EMU_GUARD; }

cudaError_t emu_func_set_attribute(const char* kernel, cudaFuncAttribute attr, int value) {
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || value > 227 * 1024) {
            emu_fail(cudaErrorInvalidValue, "cudaFuncSetAttribute(%s): %d bytes of dynamic shared memory exceeds the H100's 227 KiB",
                     kernel, value);
            return sticky;
        }
        max_dyn_smem[kernel] = value;
    }
    return sticky;
}

/* Run the block blockIdx to completion (or to the first error). */
static void run_block(int n) {
    for (int i = 0; i < n; i++) {
        Fiber& f = fibers[i];
        f.linear = i;
        f.tid = dim3(i % blockDim.x, (i / blockDim.x) % blockDim.y, i / (blockDim.x * blockDim.y));
        /* a fiber left inside a body (its block was abandoned at an error) starts afresh; a finished
         * one waits at the top of its loop and runs the new body from there */
        if (f.started && f.state != F_DONE) f.started = 0;
        f.state = F_RUN;
    }
    int nw = (n + 31) / 32;
    for (int w = 0; w < nw; w++) {
        warps[w].gen = 0;
        memset(warps[w].slot_gen, 0xff, sizeof warps[w].slot_gen);
        memset(warps[w].mma_ready_gen, 0xff, sizeof warps[w].mma_ready_gen);
        memset(warps[w].ldm_ready_gen, 0xff, sizeof warps[w].ldm_ready_gen);
    }
    fill_guard(dyn_smem.data(), dyn_smem.size()); /* shared memory starts as garbage */
    fill_nan(dyn_smem.data() + EMU_GUARD, dyn_smem_bytes);
    std::vector<int> order(n);
    for (;;) {
        /* ORDER_RANDOM: resume every runnable fiber, in a fresh pseudo-random order.
         * ORDER_ASCENDING / _DESCENDING: resume only the runnable lanes of the first (last) warp that
         * has any, so that one warp runs ahead through its shuffles as far as it can before any
         * other moves: what a real GPU may do, and what exposes a warp reusing shared memory that
         * slower warps have not finished reading. */
        int m = 0;
        if (order_mode == ORDER_RANDOM) {
            for (int i = 0; i < n; i++)
                if (fibers[i].state == F_RUN) order[m++] = i;
        } else {
            for (int k = 0; k < nw && m == 0; k++) {
                int w = order_mode == ORDER_ASCENDING ? k : nw - 1 - k;
                int lo = 32 * w, hi = min(lo + 32, n);
                for (int i = lo; i < hi; i++) {
                    int f = order_mode == ORDER_ASCENDING ? i : hi - 1 - (i - lo);
                    if (fibers[f].state == F_RUN) order[m++] = f;
                }
            }
        }
        for (int i = m - 1; i > 0 && order_mode == ORDER_RANDOM; i--) {
            order_rng ^= order_rng << 13, order_rng ^= order_rng >> 7, order_rng ^= order_rng << 17;
            int j = (int)(order_rng % (uint64_t)(i + 1));
            int t = order[i];
            order[i] = order[j], order[j] = t;
        }
#if defined(__x86_64__)
        if (m > 0) { /* the fibers run one after another (fiber_next) */
            round_order = order.data();
            round_m = m;
            round_k = 0;
            cur = &fibers[order[0]];
            threadIdx = cur->tid;
            fiber_resume(cur);
            if (sticky) return; /* abandon the block: its fibers are never resumed */
        }
#else
        for (int k = 0; k < m; k++) {
            cur = &fibers[order[k]];
            threadIdx = cur->tid;
            fiber_resume(cur);
            if (sticky) return; /* abandon the block: its fibers are never resumed */
        }
#endif
        /* one pass: the states counted as the round left them, and every warp whose live lanes all wait at a
         * shuffle released (the counts are taken before a warp's release: a released lane is not runnable here) */
        int done = 0, at_barrier = 0, at_shuffle = 0, runnable = 0;
        int released = 0;
        for (int w = 0; w < nw; w++) {
            int lo = 32 * w, hi = min(lo + 32, n), live = 0, waiting = 0;
            unsigned mask = 0;
            for (int i = lo; i < hi; i++) {
                int st = fibers[i].state;
                runnable += st == F_RUN;
                at_barrier += st == F_BARRIER;
                if (st == F_DONE) {
                    done++;
                    continue;
                }
                live++;
                if (st == F_SHUFFLE) waiting++, at_shuffle++, mask = fibers[i].mask;
            }
            if (waiting == 0 || waiting != live) continue;
            if (mask == 0xffffffffu && live != 32) {
                emu_fail(cudaErrorLaunchFailure, "%s: block (%u,%u,%u) warp %d: full-mask shuffle with %d of 32 lanes active",
                         cur_kernel, blockIdx.x, blockIdx.y, blockIdx.z, w, live);
                return;
            }
            for (int i = lo; i < hi; i++)
                if (fibers[i].state == F_SHUFFLE) fibers[i].state = F_RUN;
            warps[w].gen++;
            released = 1;
        }
        if (done == n) break;
        if (runnable) continue; /* other warps still have work before anything else can be decided */
        if (!released && at_shuffle == 0 && at_barrier > 0) { /* every live thread at __syncthreads */
            for (int i = 0; i < n; i++)
                if (fibers[i].state == F_BARRIER) fibers[i].state = F_RUN;
            released = 1;
        }
        if (!released) {
            emu_fail(cudaErrorLaunchFailure,
                     "%s: block (%u,%u,%u) deadlocked: %d threads at __syncthreads, %d at a warp shuffle, %d exited "
                     "(a barrier in divergent code?)",
                     cur_kernel, blockIdx.x, blockIdx.y, blockIdx.z, at_barrier, at_shuffle, done);
            return;
        }
    }
    if (!guard_intact(dyn_smem.data(), EMU_GUARD) || !guard_intact(dyn_smem.data() + EMU_GUARD + dyn_smem_bytes, EMU_GUARD))
        emu_fail(cudaErrorIllegalAddress, "%s: block (%u,%u,%u) wrote outside its %zu bytes of dynamic shared memory",
                 cur_kernel, blockIdx.x, blockIdx.y, blockIdx.z, dyn_smem_bytes);
}

static void launch_run(const char* kernel, EmuCfg cfg, const std::function<void()>& body);

void emu_launch(const char* kernel, EmuCfg cfg, const std::function<void()>& body) {
    emu_on_stream(cfg.stream, kernel);
    if (sticky) return;
    unsigned long n = (unsigned long)cfg.block.x * cfg.block.y * cfg.block.z;
    if (cfg.grid.x == 0 || cfg.grid.y == 0 || cfg.grid.z == 0) {
        emu_fail(cudaErrorInvalidConfiguration, "launch of %s with an empty grid (%u,%u,%u)", kernel, cfg.grid.x, cfg.grid.y,
                 cfg.grid.z);
        return;
    }
    if (n == 0 || n > 1024 || cfg.block.z > 64 || cfg.grid.y > 65535 || cfg.grid.z > 65535 || cfg.grid.x > 2147483647u) {
        emu_fail(cudaErrorInvalidConfiguration, "launch of %s with grid (%u,%u,%u) block (%u,%u,%u)", kernel, cfg.grid.x,
                 cfg.grid.y, cfg.grid.z, cfg.block.x, cfg.block.y, cfg.block.z);
        return;
    }
    int limit = 48 * 1024;
    auto it = max_dyn_smem.find(kernel);
    if (it != max_dyn_smem.end()) limit = it->second;
    if (cfg.smem > (size_t)limit) {
        emu_fail(cudaErrorInvalidValue, "launch of %s with %zu bytes of dynamic shared memory, above its limit of %d", kernel,
                 cfg.smem, limit);
        return;
    }
    if (capturing(cfg.stream)) { /* recorded: the body's captures are copies (gen.py writes [=]) */
        std::function<void()> b = body;
        capture_add(cfg.stream, [=] {
            if (!sticky) launch_run(kernel, cfg, b);
        });
        return;
    }
    op_counts[EMU_OP_KERNEL]++;
    if (compute_delay()) { /* the body's captures are copies (gen.py writes [=]): it can run later */
        std::function<void()> b = body;
        enqueue_compute(cfg.stream, [=] {
            if (!sticky) launch_run(kernel, cfg, b);
        });
        return;
    }
    run_now(cfg.stream);
    launch_run(kernel, cfg, body);
}

/* Run a launch whose configuration was checked (emu_launch) now. */
static void launch_run(const char* kernel, EmuCfg cfg, const std::function<void()>& body) {
    DeviceOpen open(kernel);
    unsigned long n = (unsigned long)cfg.block.x * cfg.block.y * cfg.block.z;
    if (fibers.size() < n) {
        size_t old = fibers.size();
        fibers.resize(n);
        /* the new fibers' stacks in one mapping on huge pages where the kernel gives them: a round touches every
         * fiber's stack top, one page each with 4 KiB pages (more than the TLB holds) */
        size_t bytes = (n - old) * (size_t)EMU_STACK_STRIDE;
        char* m = (char*)mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            fprintf(stderr, "cuda-emu: no memory for %zu fiber stacks\n", n - old);
            abort();
        }
        madvise(m, bytes, MADV_HUGEPAGE);
        for (size_t i = old; i < n; i++) fibers[i].stack = m + (i - old) * (size_t)EMU_STACK_STRIDE;
    }
    if (warps.size() < (n + 31) / 32) warps.resize((n + 31) / 32);
    dyn_smem_bytes = cfg.smem;
    dyn_smem.assign(cfg.smem + 2 * EMU_GUARD, 0);
    cur_body = &body;
    cur_kernel = kernel;
    blockDim = cfg.block;
    gridDim = cfg.grid;
    stats.launches++;
    static int two_orders = -1;
    if (two_orders < 0) {
        const char* e = getenv("RR_EMU_ORDERS");
        two_orders = e && !strcmp(e, "2");
    }
    /* the snapshots of every allocation, guards included, one after another in buffers kept from launch to launch
     * (allocating them per launch made the heap grow and shrink each time: a page fault per page touched) */
    static std::vector<unsigned char> before, first;
    if (two_orders) {
        size_t total = 0;
        for (auto& kv : allocs) total += kv.second.bytes + 2 * EMU_GUARD;
        if (before.size() < total) before.resize(total), first.resize(total);
        size_t off = 0;
        for (auto& kv : allocs) {
            size_t n = kv.second.bytes + 2 * EMU_GUARD;
            memcpy(before.data() + off, (unsigned char*)kv.first - EMU_GUARD, n);
            off += n;
        }
        atomics_used = 0;
    }
    for (int pass = 0; pass < (two_orders ? 2 : 1); pass++) {
        if (two_orders) order_mode = pass == 0 ? ORDER_ASCENDING : ORDER_DESCENDING;
        if (pass == 1) { /* keep the first pass's results, restore the memory the launch started from */
            size_t off = 0;
            for (auto& kv : allocs) {
                unsigned char* b = (unsigned char*)kv.first - EMU_GUARD;
                size_t n = kv.second.bytes + 2 * EMU_GUARD;
                memcpy(first.data() + off, b, n);
                memcpy(b, before.data() + off, n);
                off += n;
            }
        }
        /* the second pass also runs the blocks in reverse: a block that reads another's output
         * (blocks are unordered on a GPU) changes the result */
        unsigned long nb = (unsigned long)cfg.grid.x * cfg.grid.y * cfg.grid.z;
        for (unsigned long i = 0; i < nb; i++) {
            unsigned long bb = pass == 1 ? nb - 1 - i : i;
            blockIdx = dim3((unsigned)(bb % cfg.grid.x), (unsigned)(bb / cfg.grid.x % cfg.grid.y),
                            (unsigned)(bb / ((unsigned long)cfg.grid.x * cfg.grid.y)));
            run_block((int)n);
            stats.blocks++;
            stats.fibers += n;
            if (sticky) return;
        }
    }
    order_mode = ORDER_RANDOM;
    if (two_orders && !atomics_used) {
        size_t off = 0;
        for (auto& kv : allocs) {
            const unsigned char* b = (const unsigned char*)kv.first - EMU_GUARD;
            const unsigned char* f = first.data() + off;
            size_t n = kv.second.bytes + 2 * EMU_GUARD, diff = 0;
            off += n;
            if (!memcmp(b, f, n)) continue;
            for (size_t j = 0; j < n; j++) diff += b[j] != f[j];
            if (diff)
                emu_fail(cudaErrorLaunchFailure,
                         "%s: the result depends on the order its threads run in (%zu bytes of a %zu-byte allocation "
                         "differ between ascending and descending order): a missing __syncthreads, or blocks that depend "
                         "on each other?",
                         kernel, diff, kv.second.bytes);
        }
    }
    open.finish();
    check_guards(kernel);
}

/* ---- cuBLAS ------------------------------------------------------------------------------------- */

struct EmuCublas {
    int math;
    cudaStream_t stream; /* cublasSetStream's; the products are enqueued there */
};
cublasStatus_t cublasCreate(cublasHandle_t* h) {
    *h = new EmuCublas{0, NULL};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) {
    h->math = (int)m; /* TF32 is not emulated: the product is always fp32 */
    return CUBLAS_STATUS_SUCCESS;
}

/* bytes spanned by a column-major (rows, cols) operand with leading dimension ld */
static size_t span_bytes(int rows, int cols, int ld) {
    if (rows <= 0 || cols <= 0) return 0;
    return ((size_t)(cols - 1) * ld + rows) * sizeof(float);
}

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
                           float* C, int ldc) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    emu_on_stream(h->stream, "cublasSgemm");
    if (!compute_delay() && !capturing(h->stream)) run_now(h->stream);
    int a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
    int b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
    if (m < 0 || n < 0 || k < 0 || lda < max(1, a_rows) || ldb < max(1, b_rows) || ldc < max(1, m))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (sticky) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (!in_alloc(A, span_bytes(a_rows, a_cols, lda)) || !in_alloc(B, span_bytes(b_rows, b_cols, ldb)) ||
        !in_alloc(C, span_bytes(m, n, ldc))) {
        emu_fail(cudaErrorIllegalAddress, "cublasSgemm(m=%d n=%d k=%d lda=%d ldb=%d ldc=%d): an operand reaches outside its allocation",
                 m, n, k, lda, ldb, ldc);
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    if (!capturing(h->stream)) op_counts[EMU_OP_BLAS]++;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    float al = *alpha, be = *beta; /* host scalars: read at the call */
    auto run = [=] {
        DeviceOpen open("cublasSgemm");
        blas_flops_add((uint64_t)m, (uint64_t)n, (uint64_t)k);
        cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                    tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k, al, A, lda, B, ldb, be, C, ldc);
    };
    if (capture_add(h->stream, run)) return CUBLAS_STATUS_SUCCESS;
    if (compute_delay()) enqueue_compute(h->stream, run);
    else run();
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- cuBLASLt ----------------------------------------------------------------------------------- */

struct EmuLt {
    int unused;
};
struct EmuLtDesc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    cublasOperation_t ta, tb;
    cublasLtEpilogue_t epilogue;
    const float* bias;
    float* aux;     /* GELU_AUX_BIAS: the pre-activation, f32 (the D type), leading dimension aux_ld */
    int64_t aux_ld;
    int32_t bias_type; /* CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: -1 (unset: the D type) or a type */
};
struct EmuLtLayout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
};
cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
    *h = new EmuLt{0};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale) {
    *d = new EmuLtDesc{compute, scale, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0, -1};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
    if (!d || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
        if (size != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->ta, buf, size);
        break;
    case CUBLASLT_MATMUL_DESC_TRANSB:
        if (size != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->tb, buf, size);
        break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        if (size != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->epilogue, buf, size);
        break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        if (size != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->bias, buf, size);
        break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
        if (size != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->aux, buf, size);
        break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
        if (size != sizeof(int64_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->aux_ld, buf, size);
        break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
        if (size != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->bias_type, buf, size);
        break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
    if ((int64_t)rows > ld && rows > 0 && cols > 0) return CUBLAS_STATUS_INVALID_VALUE; /* ld >= rows */
    *l = new EmuLtLayout{type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}

static size_t lt_span_elems_n(uint64_t rows, uint64_t cols, int64_t ld) {
    return rows == 0 || cols == 0 ? 0 : (size_t)(cols - 1) * (size_t)ld + rows;
}
static size_t lt_span_elems(const EmuLtLayout* l) {
    if (l->rows == 0 || l->cols == 0) return 0;
    return (size_t)(l->cols - 1) * (size_t)l->ld + l->rows;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t la, const void* B, cublasLtMatrixLayout_t lb, const void* beta,
                              const void* C, cublasLtMatrixLayout_t lc, void* D, cublasLtMatrixLayout_t ldd,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
    if (!h || !d || !la || !lb || !lc || !ldd) return CUBLAS_STATUS_NOT_INITIALIZED;
    emu_on_stream(stream, "cublasLtMatmul");
    if (!compute_delay() && !capturing(stream)) run_now(stream);
    /* C = D f32, or bf16 (the bf16-activation table's forward: the f32 result, bias included, rounded to
     * bf16 nearest-even in the store). The bias and the Aux are in D's type: a BIAS_DATA_TYPE other than D's is
     * refused as cuBLASLt refused an f32 bias with a bf16 D on an H200 (INVALID_VALUE) */
    if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F || la->type != CUDA_R_16BF ||
        lb->type != CUDA_R_16BF || (lc->type != CUDA_R_32F && lc->type != CUDA_R_16BF) || ldd->type != lc->type)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    int d16 = ldd->type == CUDA_R_16BF;
    if (d->bias_type != -1 && d->bias_type != (int32_t)ldd->type) return CUBLAS_STATUS_INVALID_VALUE;
    if (algo || workspace || workspace_bytes) return CUBLAS_STATUS_NOT_SUPPORTED; /* not what bf16.cu passes */
    uint64_t m = d->ta == CUBLAS_OP_N ? la->rows : la->cols, k = d->ta == CUBLAS_OP_N ? la->cols : la->rows;
    uint64_t kb = d->tb == CUBLAS_OP_N ? lb->rows : lb->cols, n = d->tb == CUBLAS_OP_N ? lb->cols : lb->rows;
    if (k != kb || lc->rows != m || lc->cols != n || ldd->rows != m || ldd->cols != n || lc->ld != ldd->ld)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtEpilogue_t epi = d->epilogue;
    if (epi != CUBLASLT_EPILOGUE_DEFAULT && epi != CUBLASLT_EPILOGUE_BIAS && epi != CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    int has_bias = epi == CUBLASLT_EPILOGUE_BIAS || epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    int gelu = epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    /* cuBLASLt's rules for the Aux output: a pointer, ld >= rows of D and a multiple of 8 */
    if (gelu && (!d->aux || d->aux_ld < (int64_t)m || d->aux_ld % 8 != 0)) return CUBLAS_STATUS_INVALID_VALUE;
    if (sticky) return CUBLAS_STATUS_EXECUTION_FAILED;
    size_t aux_elems = gelu && n > 0 && m > 0 ? (size_t)(n - 1) * (size_t)d->aux_ld + m : 0;
    if (!in_alloc(A, lt_span_elems(la) * 2) || !in_alloc(B, lt_span_elems(lb) * 2) || !in_alloc(C, lt_span_elems(lc) * (d16 ? 2 : 4)) ||
        !in_alloc(D, lt_span_elems(ldd) * (d16 ? 2 : 4)) || (has_bias && !in_alloc(d->bias, (size_t)m * (d16 ? 2 : 4))) ||
        (gelu && !in_alloc(d->aux, aux_elems * (d16 ? 2 : 4)))) {
        emu_fail(cudaErrorIllegalAddress,
                 "cublasLtMatmul(m=%llu n=%llu k=%llu lda=%lld ldb=%lld ldc=%lld): an operand%s reaches outside its allocation",
                 (unsigned long long)m, (unsigned long long)n, (unsigned long long)k, (long long)la->ld,
                 (long long)lb->ld, (long long)lc->ld, has_bias ? ", the bias or the Aux output" : "");
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    if (!capturing(stream)) op_counts[EMU_OP_BLAS]++;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    /* what the call reads from the host or from the descriptors (destroyed right after it): now */
    float al = *(const float*)alpha, be = *(const float*)beta;
    cublasOperation_t ta = d->ta, tb = d->tb;
    const void* bias = d->bias;
    float* aux = d->aux;
    int64_t aux_ld = d->aux_ld, lda = la->ld, ldb = lb->ld, ldc = lc->ld, ldD = ldd->ld;
    size_t na = lt_span_elems(la), nb = lt_span_elems(lb);
    auto run = [=] {
        DeviceOpen open("cublasLtMatmul");
        blas_flops_add(m, n, k);
        /* bf16 -> f32 is exact (the 16 bits are the top of the f32 word) */
        std::vector<float> a(na), b(nb);
        for (size_t i = 0; i < a.size(); i++) {
            uint32_t u = (uint32_t)((const uint16_t*)A)[i] << 16;
            memcpy(&a[i], &u, 4);
        }
        for (size_t i = 0; i < b.size(); i++) {
            uint32_t u = (uint32_t)((const uint16_t*)B)[i] << 16;
            memcpy(&b[i], &u, 4);
        }
        /* a bf16 C / D: the product in f32 words first (C widened exactly), rounded into D at the end */
        std::vector<float> d32(d16 ? lt_span_elems_n(m, n, ldD) : 0);
        float* dd = d16 ? d32.data() : (float*)D;
        if (d16) { /* beta 0: C is not read (as cuBLASLt: the traffic test counts what is touched) */
            for (uint64_t j = 0; j < n; j++)
                for (uint64_t i = 0; i < m; i++)
                    dd[j * ldD + i] = be != 0.0f ? rr_bf16_to_f32(((const uint16_t*)C)[j * ldc + i]) : 0.0f;
        } else if (D != C)
            for (uint64_t j = 0; j < n; j++) memcpy(dd + j * ldD, (const float*)C + j * ldc, m * sizeof(float));
        if (k == 0) { /* D = beta C, like cublasSgemm with k = 0 */
            for (uint64_t j = 0; j < n; j++)
                for (uint64_t i = 0; i < m; i++) dd[j * ldD + i] *= be;
        } else {
            cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                        tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, (int)m, (int)n, (int)k, al, a.data(), (int)lda,
                        b.data(), (int)ldb, be, dd, (int)ldD);
        }
        if (has_bias)
            for (uint64_t j = 0; j < n; j++)
                for (uint64_t i = 0; i < m; i++)
                    dd[j * ldD + i] += d16 ? rr_bf16_to_f32(((const uint16_t*)bias)[i]) : ((const float*)bias)[i];
        if (gelu) /* Aux = the pre-activation, D = gelu(it): the CPU reference's GELU (kernel_math.h) */
            for (uint64_t j = 0; j < n; j++)
                for (uint64_t i = 0; i < m; i++) {
                    float pre = dd[j * ldD + i];
                    if (d16) ((uint16_t*)aux)[j * aux_ld + i] = rr_f32_to_bf16(pre); /* Aux in the D type */
                    else aux[j * aux_ld + i] = pre;
                    dd[j * ldD + i] = rr_gelu_tanh(pre);
                }
        if (d16)
            for (uint64_t j = 0; j < n; j++)
                for (uint64_t i = 0; i < m; i++) ((uint16_t*)D)[j * ldD + i] = rr_f32_to_bf16(dd[j * ldD + i]);
    };
    if (capture_add(stream, run)) return CUBLAS_STATUS_SUCCESS;
    if (compute_delay()) enqueue_compute(stream, run);
    else run();
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" void emu_stats_print(void) {
    printf("cuda-emu: %ld launches, %ld blocks, %ld threads, %ld fiber switches\n", stats.launches, stats.blocks,
           stats.fibers, stats.switches);
}

/* ---- events, pinned memory, pointer kinds ---------------------------------------------------------- */

struct EmuEvent {
    EmuStream* s; /* NULL: never recorded (complete) */
    long target;  /* complete once s->done reaches it */
    double t;     /* host time of the record (cudaEventElapsedTime: the host time in between) */
};
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
    *e = new EmuEvent{NULL, 0, 0.0};
    return sticky;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t st) {
    emu_on_stream(st, "cudaEventRecord");
    if (capturing(st) && capture_refuse("cudaEventRecord on the captured stream")) return sticky;
    if (!e) {
        emu_fail(cudaErrorInvalidValue, "cudaEventRecord of a NULL event");
        return sticky;
    }
    e->s = S(st);
    e->target = e->s->enq;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    e->t = ts.tv_sec + 1e-9 * ts.tv_nsec;
    return sticky;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    if (!a || !b || !a->s || !b->s) {
        emu_fail(cudaErrorInvalidValue, "cudaEventElapsedTime of an event never recorded");
        return sticky;
    }
    *ms = (float)(1e3 * (b->t - a->t));
    return sticky;
}
static size_t emu_allocated(void) {
    size_t n = 0;
    for (auto& kv : allocs) n += kv.second.bytes;
    return n;
}
cudaError_t cudaMemGetInfo(size_t* free_b, size_t* total_b) {
    *total_b = emu_device_total();
    size_t used = emu_allocated();
    *free_b = used < *total_b ? *total_b - used : 0;
    return sticky;
}
static int event_done(const EmuEvent* e) { return !e->s || e->s->done >= e->target; }
cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (sticky) return sticky;
    poll_epoch++;
    emu_progress();
    return event_done(e) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (e->s) {
        long ns = 20000;
        for (emu_progress(); !event_done(e); emu_progress()) {
            poll_epoch++;
            struct timespec ts = {0, ns};
            nanosleep(&ts, NULL);
            if (ns < 1000000) ns *= 2;
        }
    }
    return sticky;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete e;
    return sticky;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t e, unsigned) {
    if (capturing(st) && capture_refuse("cudaStreamWaitEvent on the captured stream")) return sticky;
    if (!e) {
        emu_fail(cudaErrorInvalidValue, "cudaStreamWaitEvent on a NULL event");
        return sticky;
    }
    emu_progress();
    if (event_done(e)) return sticky;
    EmuStream* es = e->s;
    long target = e->target;
    emu_stream_enqueue(st, [=] { return es->done >= target ? 1 : 0; });
    return sticky;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) {
    *p = malloc(bytes ? bytes : 1);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeHost(void* p) {
    sync_device(); /* a queued copy into it may still be pending */
    free(p);
    return sticky;
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
    memset(a, 0, sizeof *a);
    a->type = in_alloc(p, 0) ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
    return cudaSuccess;
}
int emu_in_alloc(const void* p, size_t bytes) { return in_alloc(p, bytes); }
void emu_device_read(void* host_dst, const void* dev_src, size_t bytes) {
    DeviceOpen open;
    memcpy(host_dst, dev_src, bytes);
}
void emu_device_write(void* dev_dst, const void* host_src, size_t bytes) {
    DeviceOpen open;
    memcpy(dev_dst, host_src, bytes);
}
void emu_device_fill_nan(void* dev, size_t bytes) {
    DeviceOpen open;
    fill_nan(dev, bytes);
}

/* ---- graphs ---------------------------------------------------------------------------------------- */

cudaError_t cudaStreamBeginCapture(cudaStream_t st, cudaStreamCaptureMode) {
    if (sticky) return sticky;
    if (capture_refuse("cudaStreamBeginCapture")) return sticky;
    drain(S(st)); /* what was enqueued before belongs to no graph */
    capture_stream = S(st);
    capture_graph = new EmuGraph;
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t st, cudaGraph_t* g) {
    if (!capture_stream || S(st) != capture_stream) {
        emu_fail(cudaErrorInvalidValue, "cudaStreamEndCapture of a stream that is not being captured");
        return sticky;
    }
    *g = capture_graph;
    capture_stream = NULL;
    capture_graph = NULL;
    return sticky;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* e, cudaGraph_t g, unsigned long long) {
    if (sticky) return sticky;
    if (!g) {
        emu_fail(cudaErrorInvalidValue, "cudaGraphInstantiate of a NULL graph");
        return sticky;
    }
    *e = new EmuGraph(*g);
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t st) {
    emu_on_stream(st, "cudaGraphLaunch");
    if (sticky) return sticky;
    if (!e) {
        emu_fail(cudaErrorInvalidValue, "cudaGraphLaunch of a NULL graph");
        return sticky;
    }
    if (capture_refuse("cudaGraphLaunch")) return sticky;
    op_counts[EMU_OP_GRAPH]++;
    for (auto& node : e->nodes) enqueue_compute(st, node); /* in order on st, after what is pending there */
    return sticky;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
    delete e;
    return sticky;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    delete g;
    return sticky;
}
extern "C" long emu_graph_nodes(cudaGraphExec_t e) { return e ? (long)e->nodes.size() : 0; }
