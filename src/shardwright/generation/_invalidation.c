/* TEASAR's rolling-ball invalidation in C: `roll` clears the voxels kimimaro's
 * `roll_invalidation_ball_inside_component` does, at several times its speed.
 *
 * After each path, TEASAR clears every voxel of the segment that lies within the ball
 * around a path vertex (radius `scale * DBF + const`, nm) and is reached from that vertex
 * through voxels of the segment (26-connected), nearest first: a voxel taken by one vertex's
 * ball is not crossed by another's. kimimaro's flood pushes a voxel once for every neighbour
 * that reaches it, each push a heap operation; on a cell body, whose first balls cover all
 * of it, that is most of a trace. Here a voxel is pushed only when it is reached nearer than
 * before (its nearest distance so far is kept), so each voxel is taken at the same distance
 * from the same vertex as there. Where two vertices reach a voxel at exactly the same
 * distance, the one that reached it first takes it (kimimaro's heap takes them in an order
 * its C++ library decides).
 *
 * Input: `field`, the segment's voxels (uint8, 0 or 1, Fortran order, written in place);
 * `sources`, the path's vertices [n, 3] int64; `radii`, each vertex's ball radius [n]
 * float32 (nm); the voxel size (nm). Output: the number of voxels cleared.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* At most this many voxels in a field: every voxel is pushed at most once per neighbour, so
 * the push count fits the 32 bits an entry's order gives it. */
#define MOST_VOXELS (UINT32_MAX / 27)

typedef struct {
    uint64_t order;  /* the distance's bits, then the push count: nearest first, ties first reached */
    uint32_t at;     /* the voxel's index in the field */
    uint32_t source; /* the path vertex whose ball reached it */
} Entry;

typedef struct {
    Entry *entries;
    size_t size, capacity;
} Heap;

static int push(Heap *heap, Entry entry) {
    if (heap->size == heap->capacity) {
        size_t capacity = heap->capacity ? 2 * heap->capacity : 4096;
        Entry *grown = realloc(heap->entries, capacity * sizeof(Entry));
        if (grown == NULL) return -1;
        heap->entries = grown;
        heap->capacity = capacity;
    }
    size_t i = heap->size++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (entry.order >= heap->entries[parent].order) break;
        heap->entries[i] = heap->entries[parent];
        i = parent;
    }
    heap->entries[i] = entry;
    return 0;
}

/* The nearest entry, taken off: the hole left at the top goes down to the bottom along the
 * nearer child (one comparison a level, no branch on it), then the last entry up from there
 * (rarely more than a level or two). */
static Entry pop(Heap *heap) {
    Entry *e = heap->entries;
    Entry top = e[0], last = e[--heap->size];
    size_t n = heap->size, hole = 0;
    if (n == 0) return top;
    for (;;) {
        size_t child = 2 * hole + 1;
        if (child + 1 < n) {
            child += e[child + 1].order < e[child].order;
        } else if (child >= n) {
            break;
        }
        e[hole] = e[child];
        hole = child;
    }
    while (hole > 0) {
        size_t parent = (hole - 1) / 2;
        if (e[parent].order <= last.order) break;
        e[hole] = e[parent];
        hole = parent;
    }
    e[hole] = last;
    return top;
}

/* A distance's bits: non-negative floats order as their bits do. */
static inline uint32_t bits_of(float dist) {
    uint32_t bits;
    memcpy(&bits, &dist, sizeof bits);
    return bits;
}

static inline Entry entry_of(float dist, uint32_t *seq, uint64_t at, uint32_t source) {
    Entry entry = {((uint64_t)bits_of(dist) << 32) | (*seq)++, (uint32_t)at, source};
    return entry;
}

typedef struct {
    int64_t low[3], shape[3]; /* the box no ball reaches past */
    uint32_t *nearest;        /* bits_of(the nearest distance so far) + 1, 0: not reached */
} Reach;

/* The box around every ball, within the field: no voxel outside it can be reached. */
static int reach_of(Reach *reach, const int64_t *field_shape, const int64_t *sources,
                    const float *radii, Py_ssize_t n, const float *voxel) {
    int64_t high[3];
    for (int a = 0; a < 3; a++) {
        reach->low[a] = field_shape[a];
        high[a] = 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        for (int a = 0; a < 3; a++) {
            double extent = floor((double)radii[i] / voxel[a]) + 1;
            if (!(extent >= 0)) extent = 0; /* a negative or NaN radius: its source alone */
            double low = (double)sources[3 * i + a] - extent, top = sources[3 * i + a] + extent + 1;
            int64_t from = !(low > 0) ? 0 : (int64_t)low; /* an infinite radius: the field */
            int64_t to = !(top < (double)field_shape[a]) ? field_shape[a] : (int64_t)top;
            if (from < reach->low[a]) reach->low[a] = from;
            if (to > high[a]) high[a] = to;
        }
    }
    size_t voxels = 1;
    for (int a = 0; a < 3; a++) {
        reach->shape[a] = high[a] > reach->low[a] ? high[a] - reach->low[a] : 0;
        voxels *= (size_t)reach->shape[a];
    }
    reach->nearest = calloc(voxels ? voxels : 1, sizeof(uint32_t));
    return reach->nearest == NULL ? -1 : 0;
}

static inline uint32_t *nearest_at(const Reach *reach, int64_t x, int64_t y, int64_t z) {
    return &reach->nearest[(x - reach->low[0]) +
                           reach->shape[0] * ((y - reach->low[1]) + reach->shape[1] * (z - reach->low[2]))];
}

/* The flood itself; -1 where memory ran out. */
static int64_t flood(uint8_t *field, const int64_t *shape, const int64_t *sources,
                     const float *radii, Py_ssize_t n, const float *voxel) {
    Reach reach;
    if (reach_of(&reach, shape, sources, radii, n, voxel) != 0) return -1;
    const int64_t sx = shape[0], sxy = shape[0] * shape[1];
    Heap heap = {NULL, 0, 0};
    uint32_t seq = 0;
    int64_t cleared = 0;
    int failed = 0;
    for (Py_ssize_t i = 0; i < n && !failed; i++) {
        const int64_t *at = &sources[3 * i];
        uint32_t *nearest = nearest_at(&reach, at[0], at[1], at[2]);
        const int64_t index = at[0] + sx * at[1] + sxy * at[2];
        if (!field[index] || *nearest == bits_of(0.0f) + 1) continue;
        *nearest = bits_of(0.0f) + 1;
        failed = push(&heap, entry_of(0.0f, &seq, (uint64_t)index, (uint32_t)i)) != 0;
    }
    while (heap.size > 0 && !failed) {
        const Entry taken = pop(&heap);
        if (!field[taken.at]) continue;
        field[taken.at] = 0;
        cleared++;
        const int64_t tz = taken.at / sxy, ty = (taken.at - tz * sxy) / sx;
        const int64_t tx = taken.at - tz * sxy - ty * sx;
        const int64_t *origin = &sources[3 * taken.source];
        const float radius = radii[taken.source];
        for (int dz = -1; dz <= 1; dz++) {
            const int64_t z = tz + dz;
            if (z < reach.low[2] || z >= reach.low[2] + reach.shape[2]) continue;
            for (int dy = -1; dy <= 1; dy++) {
                const int64_t y = ty + dy;
                if (y < reach.low[1] || y >= reach.low[1] + reach.shape[1]) continue;
                for (int dx = -1; dx <= 1; dx++) {
                    const int64_t x = tx + dx;
                    if ((dx | dy | dz) == 0 || x < reach.low[0] || x >= reach.low[0] + reach.shape[0])
                        continue;
                    if (!field[x + sx * y + sxy * z]) continue;
                    const float fx = voxel[0] * (float)(x - origin[0]);
                    const float fy = voxel[1] * (float)(y - origin[1]);
                    const float fz = voxel[2] * (float)(z - origin[2]);
                    const float dist = sqrtf(fx * fx + fy * fy + fz * fz);
                    uint32_t *nearest = nearest_at(&reach, x, y, z);
                    if (!(dist < radius) || (*nearest != 0 && bits_of(dist) + 1 >= *nearest))
                        continue;
                    *nearest = bits_of(dist) + 1;
                    if (push(&heap, entry_of(dist, &seq, (uint64_t)(x + sx * y + sxy * z),
                                             taken.source)) != 0) {
                        failed = 1;
                        break;
                    }
                }
                if (failed) break;
            }
            if (failed) break;
        }
    }
    free(heap.entries);
    free(reach.nearest);
    return failed ? -1 : cleared;
}

static PyObject *roll(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *field_object, *sources_object, *radii_object;
    float voxel[3];
    if (!PyArg_ParseTuple(args, "OOO(fff)", &field_object, &sources_object, &radii_object,
                          &voxel[0], &voxel[1], &voxel[2]))
        return NULL;
    Py_buffer field, sources, radii;
    if (PyObject_GetBuffer(field_object, &field, PyBUF_F_CONTIGUOUS | PyBUF_WRITABLE) != 0)
        return NULL;
    if (PyObject_GetBuffer(sources_object, &sources, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        PyBuffer_Release(&field);
        return NULL;
    }
    if (PyObject_GetBuffer(radii_object, &radii, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        PyBuffer_Release(&field);
        PyBuffer_Release(&sources);
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t n = radii.len / (Py_ssize_t)sizeof(float);
    int64_t shape[3] = {0, 0, 0};
    int fits = field.ndim == 3 && field.itemsize == 1 && sources.itemsize == 8 && radii.itemsize == 4 &&
               sources.len == n * 3 * (Py_ssize_t)sizeof(int64_t);
    if (fits) {
        for (int a = 0; a < 3; a++) shape[a] = field.shape[a];
        fits = shape[0] * shape[1] * shape[2] > 0 && shape[0] * shape[1] * shape[2] <= MOST_VOXELS;
    }
    const int64_t *at = sources.buf;
    for (Py_ssize_t i = 0; fits && i < 3 * n; i++) fits = at[i] >= 0 && at[i] < shape[i % 3];
    if (!fits) {
        PyErr_SetString(PyExc_ValueError,
                        "expected a Fortran-ordered uint8 field of at most 159 million voxels, "
                        "int64 sources [n, 3] inside it and float32 radii [n]");
    } else {
        int64_t cleared;
        Py_BEGIN_ALLOW_THREADS
        cleared = flood(field.buf, shape, at, radii.buf, n, voxel);
        Py_END_ALLOW_THREADS
        result = cleared < 0 ? PyErr_NoMemory() : PyLong_FromLongLong(cleared);
    }
    PyBuffer_Release(&field);
    PyBuffer_Release(&sources);
    PyBuffer_Release(&radii);
    return result;
}

static PyMethodDef methods[] = {
    {"roll", roll, METH_VARARGS,
     "roll(field, sources, radii, (wx, wy, wz)) -> cleared: TEASAR's rolling-ball "
     "invalidation of field (uint8, Fortran order) around sources [n, 3] int64."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_invalidation", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__invalidation(void) { return PyModule_Create(&module); }
