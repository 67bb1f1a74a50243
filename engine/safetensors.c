/* safetensors.c — safetensors writer (atomic) and validating reader. See safetensors.h for the
 * format. The reader follows the reference implementation's rules: the header is a JSON object,
 * tensors cover the data buffer exactly (sorted by offset, no overlap, no hole, nothing after the
 * last one), and every tensor's byte count equals numel * dtype size. */
#include "engine/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------------
 * small helpers */


static char* st_strdup(const char* s) {
    size_t n = strlen(s) + 1;
    char* p = mallocCheck(n);
    memcpy(p, s, n);
    return p;
}

static int st_dtype_parse(const char* s, DType* out) {
    if (!strcmp(s, "F32")) *out = DTYPE_F32;
    else if (!strcmp(s, "BF16")) *out = DTYPE_BF16;
    else if (!strcmp(s, "I32")) *out = DTYPE_I32;
    else if (!strcmp(s, "F16")) *out = DTYPE_F16;
    else if (!strcmp(s, "U8")) *out = DTYPE_U8;
    else return -1;
    return 0;
}

float st_f16_to_f32(uint16_t h) {
    /* IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; every value is exact in f32 */
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, bits;
    if (e == 0) {
        if (m == 0) bits = sign;
        else { /* subnormal: normalise */
            e = 113; /* 127 - 15 + 1 */
            while (!(m & 1024)) m <<= 1, e--;
            bits = sign | (e << 23) | ((m & 1023) << 13);
        }
    } else if (e == 31) {
        bits = sign | 0x7f800000u | (m << 13); /* inf / NaN */
    } else {
        bits = sign | ((e + 112) << 23) | (m << 13);
    }
    float x;
    memcpy(&x, &bits, 4);
    return x;
}

uint16_t st_f32_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

float st_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* ------------------------------------------------------------------------------------------------
 * writer */

typedef struct {
    char* name;
    DType dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t nbytes;
    const void* data;
    StFill fill; /* st_writer_defer: the bytes made at write time */
    void* fill_ctx;
} StWEntry;

struct StWriter {
    StWEntry* t;
    int n, cap;
    char** mk;
    char** mv;
    int nm, capm;
};

StWriter* st_writer_new(void) { return callocCheck(1, sizeof(StWriter)); }

void st_writer_add(StWriter* w, const char* name, DType dtype, int ndim, const int64_t* shape, const void* data) {
    RR_ASSERT(ndim >= 0 && ndim <= ST_MAX_DIMS);
    RR_ASSERT(strcmp(name, "__metadata__") != 0);
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->t[i].name, name)) rr_die("safetensors writer: tensor '%s' added twice", name);
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 32;
        w->t = reallocCheck(w->t, (size_t)w->cap * sizeof(StWEntry));
    }
    StWEntry* e = &w->t[w->n++];
    memset(e, 0, sizeof *e);
    e->name = st_strdup(name);
    e->dtype = dtype;
    e->ndim = ndim;
    size_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        RR_ASSERT(shape[i] >= 0);
        e->shape[i] = shape[i];
        numel *= (size_t)shape[i];
    }
    e->nbytes = numel * dtype_size(dtype);
    e->data = data;
    RR_ASSERT(data || e->nbytes == 0);
}

void st_writer_add_f32(StWriter* w, const char* name, const float* data, int ndim, int64_t d0, int64_t d1, int64_t d2,
                       int64_t d3) {
    int64_t s[4] = {d0, d1, d2, d3};
    st_writer_add(w, name, DTYPE_F32, ndim, s, data);
}

void st_writer_add_i32(StWriter* w, const char* name, const int32_t* data, int ndim, int64_t d0, int64_t d1,
                       int64_t d2, int64_t d3) {
    int64_t s[4] = {d0, d1, d2, d3};
    st_writer_add(w, name, DTYPE_I32, ndim, s, data);
}

void st_writer_defer(StWriter* w, const char* name, StFill fill, void* ctx) {
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->t[i].name, name)) {
            w->t[i].data = NULL;
            w->t[i].fill = fill;
            w->t[i].fill_ctx = ctx;
            return;
        }
    RR_ASSERT(!"st_writer_defer: a tensor not added");
}

void st_writer_meta(StWriter* w, const char* key, const char* value) {
    for (int i = 0; i < w->nm; i++)
        if (!strcmp(w->mk[i], key)) {
            free(w->mv[i]);
            w->mv[i] = st_strdup(value);
            return;
        }
    if (w->nm == w->capm) {
        w->capm = w->capm ? 2 * w->capm : 8;
        w->mk = reallocCheck(w->mk, (size_t)w->capm * sizeof(char*));
        w->mv = reallocCheck(w->mv, (size_t)w->capm * sizeof(char*));
    }
    w->mk[w->nm] = st_strdup(key);
    w->mv[w->nm] = st_strdup(value);
    w->nm++;
}

/* The parts of a file st_writer_write writes: the header, then each tensor, from where its caller holds it or
 * made into buf (st_writer_defer). */
typedef struct {
    const StWriter* w;
    const char* head;
    size_t head_len;
    char* buf;
    size_t cap;
    char* err;
    size_t err_len;
    int failed; /* a fill failed: its message is in err */
} StWPart;

static const void* st_writer_part(void* ctx, int i, size_t* size) {
    StWPart* p = ctx;
    if (i == 0) {
        *size = p->head_len;
        return p->head;
    }
    const StWEntry* e = &p->w->t[i - 1];
    *size = e->nbytes;
    if (!e->fill) return e->nbytes ? e->data : p->head;
    if (e->fill(e->fill_ctx, p->buf, p->err, p->err_len) != 0) {
        p->failed = 1;
        errno = EIO;
        return NULL;
    }
    return e->nbytes ? p->buf : p->head;
}

int st_writer_write(const StWriter* w, const char* path, char* err, size_t err_len) {
    cJSON* root = cJSON_CreateObject();
    if (w->nm > 0) {
        cJSON* meta = cJSON_AddObjectToObject(root, "__metadata__");
        for (int i = 0; i < w->nm; i++) cJSON_AddStringToObject(meta, w->mk[i], w->mv[i]);
    }
    size_t off = 0;
    for (int i = 0; i < w->n; i++) {
        const StWEntry* e = &w->t[i];
        cJSON* o = cJSON_AddObjectToObject(root, e->name);
        cJSON_AddStringToObject(o, "dtype", dtype_name(e->dtype));
        cJSON* sh = cJSON_AddArrayToObject(o, "shape");
        for (int d = 0; d < e->ndim; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)e->shape[d]));
        cJSON* offs = cJSON_AddArrayToObject(o, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + e->nbytes)));
        off += e->nbytes;
    }
    char* js = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!js) rr_die("out of memory printing a safetensors header for %s", path);
    size_t jl = strlen(js);
    size_t hl = (jl + 7) & ~(size_t)7; /* data buffer starts 8-byte aligned; pad with spaces */
    /* the header, then each tensor's bytes from where the caller holds them (a deferred one made into one
     * buffer of the largest's size): no copy of the file is made, so writing a model costs the memory of its
     * header and one tensor, not of the model (docs/engine.md "Peak memory of the whole-model commands") */
    char* head = mallocCheck(8 + hl);
    for (int b = 0; b < 8; b++) head[b] = (char)((uint64_t)hl >> (8 * b) & 0xff);
    memcpy(head + 8, js, jl);
    memset(head + 8 + jl, ' ', hl - jl);
    free(js);
    StWPart wp = {w, head, 8 + hl, NULL, 0, err, err_len, 0};
    for (int i = 0; i < w->n; i++)
        if (w->t[i].fill && w->t[i].nbytes > wp.cap) wp.cap = w->t[i].nbytes;
    if (wp.cap) wp.buf = mallocCheck(wp.cap);
    int rc = rr_write_file_atomic_parts(path, w->n + 1, st_writer_part, &wp);
    int e = errno;
    free(wp.buf);
    free(head);
    if (rc != 0 && wp.failed) return -1; /* a deferred tensor's message */
    errno = e;
    if (rc != 0) {
        rr_fail(err, err_len, "cannot write safetensors file '%s': %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

void st_writer_free(StWriter* w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) free(w->t[i].name);
    for (int i = 0; i < w->nm; i++) {
        free(w->mk[i]);
        free(w->mv[i]);
    }
    free(w->t);
    free(w->mk);
    free(w->mv);
    free(w);
}

/* ------------------------------------------------------------------------------------------------
 * reader */

/* A JSON number that must be a non-negative integer exactly representable in a double. */
static int st_json_uint(const cJSON* j, uint64_t* out) {
    if (!cJSON_IsNumber(j)) return -1;
    double v = j->valuedouble;
    if (!(v >= 0) || v > 9007199254740992.0 || v != (double)(uint64_t)v) return -1;
    *out = (uint64_t)v;
    return 0;
}

static int st_cmp_begin(const void* a, const void* b) {
    const StTensor* x = a;
    const StTensor* y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* qsort has no context argument: the tensors whose indices st_parse sorts (one parse at a time per
 * thread) */
static _Thread_local const StTensor* st_sort_tensors;
static int st_cmp_index_name(const void* a, const void* b) {
    return strcmp(st_sort_tensors[*(const int*)a].name, st_sort_tensors[*(const int*)b].name);
}
static _Thread_local char* const* st_sort_keys;
static int st_cmp_index_key(const void* a, const void* b) {
    return strcmp(st_sort_keys[*(const int*)a], st_sort_keys[*(const int*)b]);
}

void st_free(StFile* f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++) free(f->tensors[i].name);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_vals[i]);
    }
    free(f->tensors);
    free(f->by_name);
    free(f->meta_by_key);
    free(f->meta_keys);
    free(f->meta_vals);
    free(f->mem);
    free(f->path);
    if (f->fd >= 0) close(f->fd);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

void st_close_fd(StFile* f) {
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
}

/* The 8-byte header length at the start of a file of `size` bytes, checked against the limit and the size. */
static int st_header_len(const char* path, const unsigned char* first8, uint64_t size, uint64_t* hl, char* err,
                         size_t err_len) {
    *hl = 0;
    for (int b = 0; b < 8; b++) *hl |= (uint64_t)first8[b] << (8 * b);
    if (*hl > ST_MAX_HEADER) {
        rr_fail(err, err_len, "%s: header length %llu exceeds the %u-byte limit (not a safetensors file?)", path,
               (unsigned long long)*hl, ST_MAX_HEADER);
        return -1;
    }
    if (*hl > size - 8) {
        rr_fail(err, err_len, "%s: truncated: header length %llu but only %llu bytes follow the length field", path,
               (unsigned long long)*hl, (unsigned long long)(size - 8));
        return -1;
    }
    return 0;
}

/* Parses the header (hl bytes at hdr) of f, whose path, size and source (fd or mem) are set, and checks
 * every tensor's offsets against the data buffer the file's size leaves. On failure frees f. */
static int st_parse(StFile* f, const char* hdr, uint64_t hl, char* err, size_t err_len) {
    const char* path = f->path;
    uint64_t size = f->size;
    cJSON* root = NULL;
    if (hl == 0 || hdr[0] != '{') {
        rr_fail(err, err_len, "%s: header does not start with '{' (not a safetensors file?)", path);
        goto fail;
    }
    const char* end = NULL;
    root = cJSON_ParseWithLengthOpts(hdr, (size_t)hl, &end, 0);
    if (!root || !cJSON_IsObject(root)) {
        size_t at = end ? (size_t)(end - hdr) : (cJSON_GetErrorPtr() ? (size_t)(cJSON_GetErrorPtr() - hdr) : 0);
        rr_fail(err, err_len, "%s: header is not a valid JSON object (error near byte %zu of the header)", path, at);
        goto fail;
    }
    for (const char* q = end; q < hdr + hl; q++)
        if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r') {
            rr_fail(err, err_len, "%s: unexpected bytes after the header JSON at header byte %zu", path,
                   (size_t)(q - hdr));
            goto fail;
        }
    f->data_off = 8 + hl;
    f->data_size = (size_t)(size - 8 - hl);

    int count = 0;
    for (cJSON* it = root->child; it; it = it->next) count++;
    f->tensors = callocCheck((size_t)count + 1, sizeof(StTensor));
    for (cJSON* it = root->child; it; it = it->next) {
        const char* name = it->string;
        if (!strcmp(name, "__metadata__")) {
            if (!cJSON_IsObject(it)) {
                rr_fail(err, err_len, "%s: __metadata__ must be an object of strings", path);
                goto fail;
            }
            if (f->n_meta) {
                rr_fail(err, err_len, "%s: __metadata__ appears twice", path);
                goto fail;
            }
            int nm = 0;
            for (cJSON* m = it->child; m; m = m->next) nm++;
            f->meta_keys = callocCheck((size_t)nm + 1, sizeof(char*));
            f->meta_vals = callocCheck((size_t)nm + 1, sizeof(char*));
            for (cJSON* m = it->child; m; m = m->next) {
                if (!cJSON_IsString(m)) {
                    rr_fail(err, err_len, "%s: __metadata__ value of '%s' is not a string", path, m->string);
                    goto fail;
                }
                f->meta_keys[f->n_meta] = st_strdup(m->string);
                f->meta_vals[f->n_meta] = st_strdup(m->valuestring);
                f->n_meta++;
            }
            continue;
        }
        StTensor* t = &f->tensors[f->n++];
        t->name = st_strdup(name);
        if (!cJSON_IsObject(it)) {
            rr_fail(err, err_len, "%s: tensor '%s': entry is not an object", path, name);
            goto fail;
        }
        cJSON* jd = cJSON_GetObjectItemCaseSensitive(it, "dtype");
        cJSON* js = cJSON_GetObjectItemCaseSensitive(it, "shape");
        cJSON* jo = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
        if (!cJSON_IsString(jd)) {
            rr_fail(err, err_len, "%s: tensor '%s': missing or non-string \"dtype\"", path, name);
            goto fail;
        }
        if (st_dtype_parse(jd->valuestring, &t->dtype) != 0) {
            rr_fail(err, err_len, "%s: tensor '%s': dtype \"%s\" is not supported (expected F32, BF16, F16 or I32)", path,
                   name, jd->valuestring);
            goto fail;
        }
        if (!cJSON_IsArray(js)) {
            rr_fail(err, err_len, "%s: tensor '%s': missing or non-array \"shape\"", path, name);
            goto fail;
        }
        int nd = cJSON_GetArraySize(js);
        if (nd > ST_MAX_DIMS) {
            rr_fail(err, err_len, "%s: tensor '%s': %d dimensions, at most %d supported", path, name, nd, ST_MAX_DIMS);
            goto fail;
        }
        t->ndim = nd;
        /* numel * size must not overflow: track it in 128-bit-safe steps via division checks. */
        uint64_t numel = 1;
        int d = 0;
        for (cJSON* s = js->child; s; s = s->next, d++) {
            uint64_t v;
            if (st_json_uint(s, &v) != 0) {
                rr_fail(err, err_len, "%s: tensor '%s': shape[%d] is not a non-negative integer", path, name, d);
                goto fail;
            }
            t->shape[d] = (int64_t)v;
            if (v && numel > UINT64_MAX / 8 / v) {
                rr_fail(err, err_len, "%s: tensor '%s': shape overflows", path, name);
                goto fail;
            }
            numel *= v;
        }
        if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2) {
            rr_fail(err, err_len, "%s: tensor '%s': \"data_offsets\" must be an array [begin, end]", path, name);
            goto fail;
        }
        uint64_t b0, b1;
        if (st_json_uint(jo->child, &b0) != 0 || st_json_uint(jo->child->next, &b1) != 0) {
            rr_fail(err, err_len, "%s: tensor '%s': data_offsets are not non-negative integers", path, name);
            goto fail;
        }
        if (b1 < b0) {
            rr_fail(err, err_len, "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin", path, name,
                   (unsigned long long)b0, (unsigned long long)b1);
            goto fail;
        }
        if (b1 > f->data_size) {
            rr_fail(err, err_len,
                   "%s: tensor '%s': data_offsets [%llu, %llu] run past the end of the data buffer (%zu bytes; "
                   "truncated file?)",
                   path, name, (unsigned long long)b0, (unsigned long long)b1, f->data_size);
            goto fail;
        }
        uint64_t want = numel * dtype_size(t->dtype);
        if (b1 - b0 != want) {
            rr_fail(err, err_len, "%s: tensor '%s': %llu bytes in data_offsets but dtype %s x %llu elements needs %llu",
                   path, name, (unsigned long long)(b1 - b0), jd->valuestring, (unsigned long long)numel,
                   (unsigned long long)want);
            goto fail;
        }
        t->begin = (size_t)b0;
        t->end = (size_t)b1;
    }
    cJSON_Delete(root);
    root = NULL;

    /* No metadata key twice either (which of two slice descriptions would count?); sorted for st_meta */
    if (f->n_meta > 1) {
        f->meta_by_key = mallocCheck(sizeof(int) * (size_t)f->n_meta);
        for (int i = 0; i < f->n_meta; i++) f->meta_by_key[i] = i;
        st_sort_keys = f->meta_keys;
        qsort(f->meta_by_key, (size_t)f->n_meta, sizeof(int), st_cmp_index_key);
        for (int i = 1; i < f->n_meta; i++)
            if (!strcmp(f->meta_keys[f->meta_by_key[i - 1]], f->meta_keys[f->meta_by_key[i]])) {
                rr_fail(err, err_len, "%s: __metadata__ key '%s' appears twice", path, f->meta_keys[f->meta_by_key[i]]);
                goto fail;
            }
    }
    /* The tensors must tile the data buffer exactly. */
    qsort(f->tensors, (size_t)f->n, sizeof(StTensor), st_cmp_begin);
    /* No name twice: the indices sorted by name, neighbours compared (a scan per tensor was O(n^2): 78 s
     * for 200k names); the order stays for st_find's binary search */
    if (f->n > 1) {
        f->by_name = mallocCheck(sizeof(int) * (size_t)f->n);
        for (int i = 0; i < f->n; i++) f->by_name[i] = i;
        st_sort_tensors = f->tensors;
        qsort(f->by_name, (size_t)f->n, sizeof(int), st_cmp_index_name);
        for (int i = 1; i < f->n; i++)
            if (!strcmp(f->tensors[f->by_name[i - 1]].name, f->tensors[f->by_name[i]].name)) {
                rr_fail(err, err_len, "%s: tensor '%s' appears twice in the header", path, f->tensors[f->by_name[i]].name);
                goto fail;
            }
    }
    size_t at = 0;
    for (int i = 0; i < f->n; i++) {
        const StTensor* t = &f->tensors[i];
        if (t->begin < at) {
            rr_fail(err, err_len, "%s: tensor '%s': data_offsets [%zu, %zu] overlap tensor '%s' (which ends at %zu)",
                   path, t->name, t->begin, t->end, f->tensors[i - 1].name, at);
            goto fail;
        }
        if (t->begin > at) {
            rr_fail(err, err_len, "%s: tensor '%s': data_offsets begin at %zu, leaving a hole after byte %zu", path,
                   t->name, t->begin, at);
            goto fail;
        }
        at = t->end;
    }
    if (at != f->data_size) {
        rr_fail(err, err_len, "%s: %zu bytes of data follow the last tensor (file has trailing garbage)", path,
               f->data_size - at);
        goto fail;
    }
    return 0;
fail:
    if (root) cJSON_Delete(root);
    st_free(f);
    return -1;
}

/* pread of exactly len bytes at off, or -1 with errno (0 when the file ended first). */
static int st_pread_all(int fd, void* out, uint64_t len, uint64_t off, uint64_t* got) {
    char* p = out;
    *got = 0;
    while (*got < len) {
        size_t want = len - *got > ((size_t)1 << 30) ? (size_t)1 << 30 : (size_t)(len - *got);
        ssize_t r = pread(fd, p + *got, want, (off_t)(off + *got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) {
            errno = 0;
            return -1;
        }
        *got += (uint64_t)r;
    }
    return 0;
}

int st_load(StFile* f, const char* path, char* err, size_t err_len) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    char why[160];
    /* opened without waiting: a FIFO planted where a file belongs is refused below, not waited on */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        rr_fail(err, err_len, "cannot read safetensors file '%s': %s", path,
               rr_read_file_why(e, "a .safetensors file", why, sizeof why));
        return -1;
    }
    if (S_ISDIR(sb.st_mode)) {
        close(fd);
        rr_fail(err, err_len, "cannot read safetensors file '%s': %s", path,
               rr_read_file_why(EISDIR, "a .safetensors file", why, sizeof why));
        return -1;
    }
    /* a safetensors file is a regular file: a device or a pipe (/dev/zero) has no size to check a header against */
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        rr_fail(err, err_len, "cannot read safetensors file '%s': not a regular file (a device or a pipe), expected a "
               ".safetensors file", path);
        return -1;
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size > RR_MAX_SAFETENSORS) {
        char cap[32];
        rr_fmt_bytes(cap, sizeof cap, RR_MAX_SAFETENSORS);
        close(fd);
        rr_fail(err, err_len, "cannot read safetensors file '%s': %llu bytes, larger than %s, the limit for a "
               ".safetensors file", path, (unsigned long long)size, cap);
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    f->path = st_strdup(path);
    f->fd = fd;
    f->dev = (uint64_t)sb.st_dev, f->ino = (uint64_t)sb.st_ino;
    f->size = size;
    if (size < 8) {
        rr_fail(err, err_len, "%s: not a safetensors file: %llu bytes, shorter than the 8-byte header length", path,
               (unsigned long long)size);
        st_free(f);
        return -1;
    }
    unsigned char first8[8];
    uint64_t hl = 0, got = 0;
    if (st_pread_all(fd, first8, 8, 0, &got) != 0) {
        rr_fail(err, err_len, "%s: cannot read the header length: %s", path, errno ? strerror(errno) : "the file ended");
        st_free(f);
        return -1;
    }
    if (st_header_len(path, first8, size, &hl, err, err_len) != 0) {
        st_free(f);
        return -1;
    }
    char* hdr = mallocCheck((size_t)hl + 1); /* at most ST_MAX_HEADER */
    if (st_pread_all(fd, hdr, hl, 8, &got) != 0) {
        rr_fail(err, err_len, "%s: cannot read the %llu-byte header: %s (the file shrank while being opened?)", path,
               (unsigned long long)hl, errno ? strerror(errno) : "the file ended first");
        free(hdr);
        st_free(f);
        return -1;
    }
    hdr[hl] = 0;
    int rc = st_parse(f, hdr, hl, err, err_len);
    free(hdr);
    return rc;
}

int st_load_buffer(StFile* f, const char* path, const void* bytes, size_t size, char* err, size_t err_len) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->path = st_strdup(path);
    f->mem = mallocCheck(size + 1);
    if (size) memcpy(f->mem, bytes, size);
    f->mem[size] = 0;
    f->size = size;
    uint64_t hl = 0;
    if (size < 8) {
        rr_fail(err, err_len, "%s: not a safetensors file: %zu bytes, shorter than the 8-byte header length", path,
               size);
        st_free(f);
        return -1;
    }
    if (st_header_len(path, (const unsigned char*)f->mem, size, &hl, err, err_len) != 0) {
        st_free(f);
        return -1;
    }
    return st_parse(f, f->mem + 8, hl, err, err_len);
}

const StTensor* st_find(const StFile* f, const char* name) {
    if (!f->by_name) {
        for (int i = 0; i < f->n; i++)
            if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
        return NULL;
    }
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(f->tensors[f->by_name[mid]].name, name);
        if (c == 0) return &f->tensors[f->by_name[mid]];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

const char* st_meta(const StFile* f, const char* key) {
    if (!f->meta_by_key) {
        for (int i = 0; i < f->n_meta; i++)
            if (!strcmp(f->meta_keys[i], key)) return f->meta_vals[i];
        return NULL;
    }
    int lo = 0, hi = f->n_meta - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(f->meta_keys[f->meta_by_key[mid]], key);
        if (c == 0) return f->meta_vals[f->meta_by_key[mid]];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

static void st_shape_str(char* s, size_t n, int ndim, const int64_t* shape) {
    size_t k = (size_t)snprintf(s, n, "(");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(s + k, n - k, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (k < n) snprintf(s + k, n - k, ")");
}

static const StTensor* st_check(const StFile* f, const char* name, int ndim, const int64_t* shape, char* err,
                                size_t err_len) {
    const StTensor* t = st_find(f, name);
    if (!t) {
        rr_fail(err, err_len, "%s: tensor '%s' is missing", f->path, name);
        return NULL;
    }
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same) {
        char a[160], b[160];
        st_shape_str(a, sizeof a, t->ndim, t->shape);
        st_shape_str(b, sizeof b, ndim, shape);
        rr_fail(err, err_len, "%s: tensor '%s' has shape %s, expected %s", f->path, name, a, b);
        return NULL;
    }
    return t;
}

int st_expect_shape(const StFile* f, const char* name, int ndim, const int64_t* shape, char* err, size_t err_len) {
    return st_check(f, name, ndim, shape, err, err_len) ? 0 : -1;
}

int st_read_raw(const StFile* f, const StTensor* t, uint64_t off, uint64_t len, void* out, char* err, size_t err_len) {
    RR_ASSERT(off <= t->end - t->begin && len <= t->end - t->begin - off);
    if (len == 0) return 0;
    uint64_t at = f->data_off + t->begin + off;
    if (f->mem) {
        memcpy(out, f->mem + at, (size_t)len);
        return 0;
    }
    int fd = f->fd, own = 0;
    struct stat sb;
    if (fd < 0) { /* st_close_fd: reopened for this read, and it must be the file opened */
        fd = open(f->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) {
            rr_fail(err, err_len, "%s: tensor '%s': cannot reopen the file: %s", f->path, t->name, strerror(errno));
            return -1;
        }
        own = 1;
    }
    int rc = -1;
    if (fstat(fd, &sb) != 0) {
        rr_fail(err, err_len, "%s: tensor '%s': %s", f->path, t->name, strerror(errno));
    } else if (own && ((uint64_t)sb.st_dev != f->dev || (uint64_t)sb.st_ino != f->ino)) {
        rr_fail(err, err_len, "%s: tensor '%s': the file was replaced since it was opened (another file at this path "
               "now): refusing to mix the two", f->path, t->name);
    } else if ((uint64_t)sb.st_size != f->size) {
        rr_fail(err, err_len, "%s: tensor '%s': the file changed size since it was opened (%llu bytes then, %llu "
               "now): written or truncated while being read; refusing to read it", f->path, t->name,
               (unsigned long long)f->size, (unsigned long long)sb.st_size);
    } else {
        uint64_t got = 0;
        if (st_pread_all(fd, out, len, at, &got) == 0) rc = 0;
        else if (errno)
            rr_fail(err, err_len, "%s: tensor '%s': read error at byte %llu: %s", f->path, t->name,
                   (unsigned long long)(at + got), strerror(errno));
        else
            rr_fail(err, err_len, "%s: tensor '%s': the file ends at byte %llu, inside the tensor's bytes (it "
                   "should hold %llu): truncated while being read", f->path, t->name,
                   (unsigned long long)(at + got), (unsigned long long)f->size);
    }
    if (own) close(fd);
    return rc;
}

#define ST_CHUNK ((size_t)4 << 20) /* bytes per read when converting or hashing: a bound on the extra memory */

int st_read_f32_range(const StFile* f, const StTensor* t, uint64_t first, uint64_t count, float* out, char* err,
                      size_t err_len) {
    size_t es = dtype_size(t->dtype);
    RR_ASSERT(first <= (t->end - t->begin) / es && count <= (t->end - t->begin) / es - first);
    if (t->dtype == DTYPE_F32) return st_read_raw(f, t, first * 4, count * 4, out, err, err_len);
    if (t->dtype != DTYPE_BF16 && t->dtype != DTYPE_F16) {
        rr_fail(err, err_len, "%s: tensor '%s' has dtype %s, expected F32 or BF16 (or F16)", f->path, t->name,
               dtype_name(t->dtype));
        return -1;
    }
    if (count == 0) return 0;
    size_t per = ST_CHUNK / 2;
    unsigned char* p = mallocCheck(2 * (count < per ? (size_t)count : per));
    int rc = 0;
    for (uint64_t done = 0; done < count && rc == 0;) {
        size_t k = count - done < per ? (size_t)(count - done) : per;
        rc = st_read_raw(f, t, (first + done) * 2, (uint64_t)k * 2, p, err, err_len);
        for (size_t i = 0; rc == 0 && i < k; i++) {
            uint16_t h = (uint16_t)(p[2 * i] | (p[2 * i + 1] << 8));
            out[done + i] = t->dtype == DTYPE_BF16 ? st_bf16_to_f32(h) : st_f16_to_f32(h);
        }
        done += k;
    }
    free(p);
    return rc;
}

int st_tensor_xxh64(const StFile* f, const StTensor* t, uint64_t* hash, char* err, size_t err_len) {
    uint64_t n = t->end - t->begin;
    RrXxh64 s;
    rr_xxh64_init(&s, 0);
    unsigned char* p = mallocCheck(n < ST_CHUNK ? (size_t)n + 1 : ST_CHUNK);
    int rc = 0;
    for (uint64_t done = 0; done < n && rc == 0;) {
        size_t k = n - done < ST_CHUNK ? (size_t)(n - done) : ST_CHUNK;
        rc = st_read_raw(f, t, done, k, p, err, err_len);
        if (rc == 0) rr_xxh64_update(&s, p, k);
        done += k;
    }
    free(p);
    *hash = rr_xxh64_digest(&s);
    return rc;
}

int st_read_f32(const StFile* f, const char* name, float* out, int ndim, const int64_t* shape, char* err,
                size_t err_len) {
    const StTensor* t = st_check(f, name, ndim, shape, err, err_len);
    if (!t) return -1;
    if (t->dtype != DTYPE_F32 && t->dtype != DTYPE_BF16 && t->dtype != DTYPE_F16) {
        rr_fail(err, err_len, "%s: tensor '%s' has dtype %s, expected F32 or BF16 (or F16)", f->path, name,
               dtype_name(t->dtype));
        return -1;
    }
    /* out may be NULL for an empty tensor */
    return st_read_f32_range(f, t, 0, (t->end - t->begin) / dtype_size(t->dtype), out, err, err_len);
}

int st_read_i32(const StFile* f, const char* name, int32_t* out, int ndim, const int64_t* shape, char* err,
                size_t err_len) {
    const StTensor* t = st_check(f, name, ndim, shape, err, err_len);
    if (!t) return -1;
    if (t->dtype != DTYPE_I32) {
        rr_fail(err, err_len, "%s: tensor '%s' has dtype %s, expected I32", f->path, name, dtype_name(t->dtype));
        return -1;
    }
    return st_read_raw(f, t, 0, t->end - t->begin, out, err, err_len);
}
