/* Pyramid reductions in C: `average`, `mode` and `mode_nonzero` of integer voxels over blocks
 * of up to 64.
 *
 * The NumPy reductions in downsample.py are the reference; these produce the same values
 * (tests compare them on random blocks) at several times the speed, without the GIL, so a
 * pyramid costs little more than the base level. Input: a 4-D [x, y, z, c] buffer with any
 * strides whose origin sits on a block corner; partial blocks at the far edges reduce over
 * their real voxels. Output: the reduced [x, y, z, c] buffer, same type.
 *
 * average:      floor((sum + n / 2) / n) over the block's n voxels (rounded half up), exact
 *               in a 64-bit accumulator for 1-, 2- and 4-byte integers.
 * mode:         the most frequent value, zero counting like any other (tinybrain's
 *               downsample_segmentation, sparse=False).
 * mode_nonzero: the most frequent non-zero value; zero only if all are zero (sparse=True).
 *
 * Both modes compare voxels as bit patterns (one kernel per size serves every integer type)
 * and break ties as tinybrain does (downsample.py says how): for a factor halving exactly two
 * axes, COUNTLESS on a whole block's four voxels; otherwise, and on partial edge blocks, the
 * value met first in x-fastest order.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_BLOCK 64

typedef struct {
    const char *in;
    Py_ssize_t in_stride[3];
    Py_ssize_t in_shape[3];
    char *out;
    Py_ssize_t out_stride[3];
    Py_ssize_t out_shape[3];
    Py_ssize_t factor[3];
    int skip_zero; /* mode_nonzero: zero is background, never counted */
} Plane;

static inline int64_t floor_div(int64_t a, int64_t n) {
    int64_t q = a / n;
    return (a % n != 0 && a < 0) ? q - 1 : q;
}

/* k if n == 2**k, else -1: floor division by a power of two is an arithmetic shift. */
static inline int power_of_two_shift(int64_t n) {
    if (n <= 0 || (n & (n - 1)) != 0) return -1;
    int k = 0;
    while ((n >> k) != 1) k++;
    return k;
}

/* Row accumulation: for each output (y, z), add every input row of the block into acc[x].
 * ACC is the narrowest type holding 64 voxels' sum (so the loops vectorize); the rounding
 * runs in 64 bits. */
#define DEFINE_AVERAGE(NAME, T, ACC)                                                          \
    static void NAME(const Plane *p, int64_t *acc_memory) {                                   \
        ACC *acc = (ACC *)acc_memory;                                                         \
        const Py_ssize_t fx = p->factor[0], fy = p->factor[1], fz = p->factor[2];             \
        const Py_ssize_t nx = p->in_shape[0], sx = p->in_stride[0];                           \
        for (Py_ssize_t oz = 0; oz < p->out_shape[2]; oz++) {                                 \
            const Py_ssize_t z0 = oz * fz;                                                    \
            const Py_ssize_t z1 = z0 + fz < p->in_shape[2] ? z0 + fz : p->in_shape[2];        \
            for (Py_ssize_t oy = 0; oy < p->out_shape[1]; oy++) {                             \
                const Py_ssize_t y0 = oy * fy;                                                \
                const Py_ssize_t y1 = y0 + fy < p->in_shape[1] ? y0 + fy : p->in_shape[1];    \
                memset(acc, 0, (size_t)p->out_shape[0] * sizeof(ACC));                        \
                for (Py_ssize_t z = z0; z < z1; z++) {                                        \
                    for (Py_ssize_t y = y0; y < y1; y++) {                                    \
                        const char *row = p->in + z * p->in_stride[2] + y * p->in_stride[1]; \
                        if (fx == 2 && sx == (Py_ssize_t)sizeof(T)) {                         \
                            const T *r = (const T *)row;                                      \
                            const Py_ssize_t pairs = nx / 2;                                  \
                            for (Py_ssize_t i = 0; i < pairs; i++)                            \
                                acc[i] += (ACC)((ACC)r[2 * i] + (ACC)r[2 * i + 1]);           \
                            if (nx & 1) acc[pairs] += (ACC)r[nx - 1];                         \
                        } else if (fx == 1 && sx == (Py_ssize_t)sizeof(T)) {                  \
                            const T *r = (const T *)row;                                      \
                            for (Py_ssize_t i = 0; i < nx; i++) acc[i] += (ACC)r[i];          \
                        } else {                                                              \
                            for (Py_ssize_t x = 0; x < nx; x++)                               \
                                acc[x / fx] += (ACC)(*(const T *)(row + x * sx));             \
                        }                                                                     \
                    }                                                                         \
                }                                                                             \
                const int64_t ny_nz = (int64_t)(y1 - y0) * (z1 - z0);                         \
                char *out = p->out + oz * p->out_stride[2] + oy * p->out_stride[1];           \
                const Py_ssize_t whole = nx / fx; /* blocks with all fx columns */             \
                const int64_t n = fx * ny_nz;                                                 \
                const int shift = power_of_two_shift(n);                                      \
                for (Py_ssize_t ox = 0; ox < whole; ox++) {                                   \
                    const int64_t a = (int64_t)acc[ox] + n / 2;                               \
                    *(T *)(out + ox * p->out_stride[0]) =                                     \
                        (T)(shift >= 0 ? a >> shift : floor_div(a, n));                       \
                }                                                                             \
                for (Py_ssize_t ox = whole; ox < p->out_shape[0]; ox++) {                     \
                    const int64_t m = (nx - ox * fx) * ny_nz; /* a partial edge block */      \
                    *(T *)(out + ox * p->out_stride[0]) =                                     \
                        (T)floor_div((int64_t)acc[ox] + m / 2, m);                            \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
    }

DEFINE_AVERAGE(average_u8, uint8_t, uint16_t)
DEFINE_AVERAGE(average_i8, int8_t, int16_t)
DEFINE_AVERAGE(average_u16, uint16_t, uint32_t)
DEFINE_AVERAGE(average_i16, int16_t, int32_t)
DEFINE_AVERAGE(average_u32, uint32_t, uint64_t)
DEFINE_AVERAGE(average_i32, int32_t, int64_t)

/* A factor halving exactly two axes (2,2,1 and its turns) tinybrain reduces with COUNTLESS,
 * whose ties differ from its counting kernel's. For such a factor: 1, and the byte offsets
 * from a block's first voxel a of b (one voxel along y; at 2,1,2 along z), c (along the other
 * axis) and d (along both), as tinybrain takes them. For any other factor: 0. */
static int countless_offsets(const Plane *p, Py_ssize_t offsets[3]) {
    Py_ssize_t halved[2] = {0, 0};
    int twos = 0, ones = 0;
    for (int i = 0; i < 3; i++) {
        if (p->factor[i] == 2 && twos < 2) halved[twos] = p->in_stride[i];
        twos += p->factor[i] == 2;
        ones += p->factor[i] == 1;
    }
    const int b_first = p->factor[0] == 1; /* 1,2,2: y is the first axis halved */
    offsets[0] = b_first ? halved[0] : halved[1];
    offsets[1] = b_first ? halved[1] : halved[0];
    offsets[2] = halved[0] + halved[1];
    return twos == 2 && ones == 1;
}

/* Per block. A whole block of a two-axis factor: COUNTLESS, a value met twice among a, b, c,
 * else d (mode_nonzero: d if non-zero, else the first non-zero of a, b, c). Otherwise gather
 * in x-fastest order; a uniform block (most of a segmentation) is its own mode; else count
 * each value from its first occurrence on: the strictly greatest count wins, so of equal
 * counts the value met first does; a count of half the block or more cannot be beaten, and
 * a value with fewer voxels left than the best count cannot win. */
#define DEFINE_MODE(NAME, T)                                                                  \
    static void NAME(const Plane *p, int64_t *unused) {                                       \
        (void)unused;                                                                         \
        T values[MAX_BLOCK];                                                                  \
        const Py_ssize_t fx = p->factor[0], fy = p->factor[1], fz = p->factor[2];             \
        const Py_ssize_t sx = p->in_stride[0], sy = p->in_stride[1], sz = p->in_stride[2];    \
        const int skip_zero = p->skip_zero;                                                   \
        Py_ssize_t off[3];                                                                    \
        const int countless = countless_offsets(p, off);                                      \
        for (Py_ssize_t oz = 0; oz < p->out_shape[2]; oz++) {                                 \
            const Py_ssize_t z0 = oz * fz;                                                    \
            const Py_ssize_t z1 = z0 + fz < p->in_shape[2] ? z0 + fz : p->in_shape[2];        \
            for (Py_ssize_t oy = 0; oy < p->out_shape[1]; oy++) {                             \
                const Py_ssize_t y0 = oy * fy;                                                \
                const Py_ssize_t y1 = y0 + fy < p->in_shape[1] ? y0 + fy : p->in_shape[1];    \
                for (Py_ssize_t ox = 0; ox < p->out_shape[0]; ox++) {                         \
                    const Py_ssize_t x0 = ox * fx;                                            \
                    const Py_ssize_t x1 = x0 + fx < p->in_shape[0] ? x0 + fx : p->in_shape[0];\
                    T best_value;                                                             \
                    if (countless && x1 - x0 == fx && y1 - y0 == fy && z1 - z0 == fz) {       \
                        const char *at = p->in + z0 * sz + y0 * sy + x0 * sx;                 \
                        const T a = *(const T *)at, b = *(const T *)(at + off[0]);            \
                        const T c = *(const T *)(at + off[1]), d = *(const T *)(at + off[2]); \
                        const T pair = (a == b || a == c) ? a : b;                            \
                        if ((a == b || a == c || b == c) && (pair != 0 || !skip_zero))        \
                            best_value = pair;                                                \
                        else if (d != 0 || !skip_zero)                                        \
                            best_value = d;                                                   \
                        else                                                                  \
                            best_value = a != 0 ? a : (b != 0 ? b : c);                       \
                    } else {                                                                  \
                        int n = 0, uniform = 1;                                               \
                        for (Py_ssize_t z = z0; z < z1; z++)                                  \
                            for (Py_ssize_t y = y0; y < y1; y++) {                            \
                                const char *row = p->in + z * sz + y * sy;                    \
                                for (Py_ssize_t x = x0; x < x1; x++) {                        \
                                    values[n] = *(const T *)(row + x * sx);                   \
                                    uniform &= values[n] == values[0];                        \
                                    n++;                                                      \
                                }                                                             \
                            }                                                                 \
                        best_value = values[0];                                               \
                        for (int i = 0, best = 0; !uniform && i < n && n - i > best; i++) {   \
                            const T v = values[i];                                            \
                            if (skip_zero && v == 0) continue;                                \
                            int count = 1;                                                    \
                            for (int j = i + 1; j < n; j++) count += values[j] == v;          \
                            if (count > best) {                                               \
                                best = count;                                                 \
                                best_value = v;                                               \
                                if (2 * count >= n) break;                                    \
                            }                                                                 \
                        }                                                                     \
                    }                                                                         \
                    *(T *)(p->out + oz * p->out_stride[2] + oy * p->out_stride[1] +           \
                           ox * p->out_stride[0]) = best_value;                               \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
    }

DEFINE_MODE(mode_8, uint8_t)
DEFINE_MODE(mode_16, uint16_t)
DEFINE_MODE(mode_32, uint32_t)
DEFINE_MODE(mode_64, uint64_t)

typedef void (*Kernel)(const Plane *, int64_t *);

typedef enum { AVERAGE, MODE, MODE_NONZERO } Reduction;

/* The kernel for a buffer format ('B', 'h', 'Q', ...), or NULL where NumPy must do it. */
static Kernel pick(Reduction reduction, const Py_buffer *view) {
    const char *format = view->format ? view->format : "B";
    if (*format == '<' || *format == '=' || *format == '@') format++;
    const char code = *format;
    const int is_signed = code == 'b' || code == 'h' || code == 'i' || code == 'l' || code == 'q';
    const int is_unsigned = code == 'B' || code == 'H' || code == 'I' || code == 'L' || code == 'Q';
    if (!is_signed && !is_unsigned) return NULL;
    if (reduction != AVERAGE) {
        switch (view->itemsize) {
        case 1: return mode_8;
        case 2: return mode_16;
        case 4: return mode_32;
        case 8: return mode_64;
        default: return NULL;
        }
    }
    switch (view->itemsize) {
    case 1: return is_signed ? average_i8 : average_u8;
    case 2: return is_signed ? average_i16 : average_u16;
    case 4: return is_signed ? average_i32 : average_u32;
    default: return NULL;
    }
}

static PyObject *reduce_blocks(PyObject *args, Reduction reduction) {
    PyObject *source, *target;
    Py_ssize_t fx, fy, fz;
    if (!PyArg_ParseTuple(args, "OO(nnn)", &source, &target, &fx, &fy, &fz)) return NULL;
    if (fx < 1 || fy < 1 || fz < 1 || fx * fy * fz > MAX_BLOCK) {
        PyErr_SetString(PyExc_ValueError, "factors must be positive, at most 64 voxels a block");
        return NULL;
    }
    Py_buffer in, out;
    if (PyObject_GetBuffer(source, &in, PyBUF_RECORDS_RO) != 0) return NULL;
    if (PyObject_GetBuffer(target, &out, PyBUF_RECORDS) != 0) {
        PyBuffer_Release(&in);
        return NULL;
    }
    PyObject *result = NULL;
    Kernel kernel = pick(reduction, &in);
    Py_ssize_t factor[3] = {fx, fy, fz};
    int shapes_match = in.ndim == 4 && out.ndim == 4 && in.itemsize == out.itemsize &&
                       in.shape[3] == out.shape[3];
    for (int i = 0; shapes_match && i < 3; i++)
        shapes_match = out.shape[i] == (in.shape[i] + factor[i] - 1) / factor[i];
    if (!shapes_match) {
        PyErr_SetString(PyExc_ValueError, "expected [x, y, z, c] arrays, the output reduced");
    } else if (kernel == NULL) {
        PyErr_SetString(PyExc_TypeError, "no C reduction for this voxel type");
    } else {
        int64_t *acc = malloc((size_t)(out.shape[0] + 1) * sizeof(int64_t));
        if (acc == NULL) {
            PyErr_NoMemory();
        } else {
            Py_BEGIN_ALLOW_THREADS
            for (Py_ssize_t c = 0; c < in.shape[3]; c++) {
                Plane plane = {(const char *)in.buf + c * in.strides[3],
                               {in.strides[0], in.strides[1], in.strides[2]},
                               {in.shape[0], in.shape[1], in.shape[2]},
                               (char *)out.buf + c * out.strides[3],
                               {out.strides[0], out.strides[1], out.strides[2]},
                               {out.shape[0], out.shape[1], out.shape[2]},
                               {fx, fy, fz},
                               reduction == MODE_NONZERO};
                kernel(&plane, acc);
            }
            Py_END_ALLOW_THREADS
            free(acc);
            result = Py_NewRef(Py_None);
        }
    }
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    return result;
}

static PyObject *average(PyObject *self, PyObject *args) {
    (void)self;
    return reduce_blocks(args, AVERAGE);
}

static PyObject *mode(PyObject *self, PyObject *args) {
    (void)self;
    return reduce_blocks(args, MODE);
}

static PyObject *mode_nonzero(PyObject *self, PyObject *args) {
    (void)self;
    return reduce_blocks(args, MODE_NONZERO);
}

static PyMethodDef methods[] = {
    {"average", average, METH_VARARGS,
     "average(block_xyzc, out_xyzc, (fx, fy, fz)): block means rounded half up, into out."},
    {"mode", mode, METH_VARARGS,
     "mode(block_xyzc, out_xyzc, (fx, fy, fz)): most frequent value, tinybrain's ties."},
    {"mode_nonzero", mode_nonzero, METH_VARARGS,
     "mode_nonzero(block_xyzc, out_xyzc, (fx, fy, fz)): most frequent non-zero value."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_reduce", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__reduce(void) { return PyModule_Create(&module); }
