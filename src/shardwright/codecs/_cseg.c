/* compressed_segmentation encoder that releases the GIL.
 *
 * The reference `compressed-segmentation` package holds the GIL while it encodes, so a
 * multi-threaded Dask worker encodes segmentations on one core. This encoder writes the same
 * bytes (block headers, bit-packed indices, label tables shared between blocks of a channel)
 * and runs with the GIL released, reading the [x, y, z, c] input through its strides so that
 * a view of the source needs no copy first. Layout of the output (32-bit little-endian words):
 * one offset per channel, then per channel a header of two words per block (table offset |
 * encoded bits << 24, offset of the packed indices), each block's packed indices followed by
 * its label table when that table was not written before in the channel.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint32_t *data;
    size_t size;
    size_t capacity;
} Words;

/* Append n zeroed words; returns 0 on success, -1 when out of memory. */
static int words_extend(Words *w, size_t n) {
    size_t need = w->size + n;
    if (need > w->capacity) {
        size_t capacity = w->capacity ? w->capacity : 1024;
        while (capacity < need) capacity *= 2;
        uint32_t *data = (uint32_t *)realloc(w->data, capacity * sizeof(uint32_t));
        if (data == NULL) return -1;
        w->data = data;
        w->capacity = capacity;
    }
    memset(w->data + w->size, 0, n * sizeof(uint32_t));
    w->size = need;
    return 0;
}

/* The distinct labels of one block: open addressing, slots cleared by a generation stamp. */
typedef struct {
    uint64_t *keys;
    uint32_t *stamp;
    uint32_t *index;
    size_t mask;
    uint32_t generation;
} LabelSet;

/* Label tables already written in the channel, keyed by their sorted contents. */
typedef struct {
    uint64_t *hash;
    size_t *start; /* into pool */
    uint32_t *count;
    uint32_t *offset;
    size_t mask;
    uint64_t *pool;
    size_t pool_size;
} TableCache;

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static size_t pow2_at_least(size_t n) {
    size_t p = 16;
    while (p < n) p *= 2;
    return p;
}

static inline uint64_t load_label(const char *p, int itemsize) {
    if (itemsize == 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Slot of `key`, inserting it if absent (*added set to 1). */
static inline size_t labelset_slot(LabelSet *s, uint64_t key, int *added) {
    size_t slot = (size_t)mix64(key) & s->mask;
    for (;;) {
        if (s->stamp[slot] != s->generation) {
            s->stamp[slot] = s->generation;
            s->keys[slot] = key;
            *added = 1;
            return slot;
        }
        if (s->keys[slot] == key) {
            *added = 0;
            return slot;
        }
        slot = (slot + 1) & s->mask;
    }
}

static int compare_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void sort_labels(uint64_t *v, size_t n) {
    if (n > 32) {
        qsort(v, n, sizeof(uint64_t), compare_u64);
        return;
    }
    for (size_t i = 1; i < n; i++) {
        uint64_t key = v[i];
        size_t j = i;
        while (j > 0 && v[j - 1] > key) {
            v[j] = v[j - 1];
            j--;
        }
        v[j] = key;
    }
}

static uint64_t table_hash(const uint64_t *labels, size_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ n;
    for (size_t i = 0; i < n; i++) h = mix64(h ^ labels[i]) + i;
    return h;
}

/* Offset of an identical table written before, or -1 (then the caller writes it). */
static int64_t cache_find(const TableCache *c, uint64_t hash, const uint64_t *labels, size_t n,
                          size_t *slot_out) {
    size_t slot = (size_t)hash & c->mask;
    while (c->count[slot] != 0) {
        if (c->hash[slot] == hash && c->count[slot] == n &&
            memcmp(c->pool + c->start[slot], labels, n * sizeof(uint64_t)) == 0) {
            return c->offset[slot];
        }
        slot = (slot + 1) & c->mask;
    }
    *slot_out = slot;
    return -1;
}

enum { OK = 0, NO_MEMORY = 1, TOO_LARGE = 2 };

typedef struct {
    const char *base;
    Py_ssize_t stride[3];
    Py_ssize_t size[3];
    Py_ssize_t block[3];
    int itemsize;
} Channel;

static int encode_channel(const Channel *ch, Words *out, LabelSet *set, uint64_t *uniq,
                          TableCache *cache) {
    const size_t base_offset = out->size;
    size_t grid[3], blocks = 1;
    for (int i = 0; i < 3; i++) {
        grid[i] = (size_t)((ch->size[i] + ch->block[i] - 1) / ch->block[i]);
        blocks *= grid[i];
    }
    const size_t block_volume = (size_t)(ch->block[0] * ch->block[1] * ch->block[2]);
    const size_t words_per_label = (size_t)ch->itemsize / 4;
    if (words_extend(out, 2 * blocks) != 0) return NO_MEMORY;
    cache->pool_size = 0;
    memset(cache->count, 0, (cache->mask + 1) * sizeof(uint32_t));

    size_t b[3];
    for (b[2] = 0; b[2] < grid[2]; b[2]++)
    for (b[1] = 0; b[1] < grid[1]; b[1]++)
    for (b[0] = 0; b[0] < grid[0]; b[0]++) {
        Py_ssize_t actual[3];
        const char *origin = ch->base;
        for (int i = 0; i < 3; i++) {
            Py_ssize_t pos = (Py_ssize_t)b[i] * ch->block[i];
            actual[i] = ch->size[i] - pos < ch->block[i] ? ch->size[i] - pos : ch->block[i];
            origin += pos * ch->stride[i];
        }
        /* The block's distinct labels, sorted; consecutive equal voxels skip the lookup. */
        set->generation++;
        if (set->generation == 0) {
            memset(set->stamp, 0, (set->mask + 1) * sizeof(uint32_t));
            set->generation = 1;
        }
        size_t n = 0;
        uint64_t previous = load_label(origin, ch->itemsize) + 1;
        for (Py_ssize_t z = 0; z < actual[2]; z++)
        for (Py_ssize_t y = 0; y < actual[1]; y++) {
            const char *row = origin + z * ch->stride[2] + y * ch->stride[1];
            for (Py_ssize_t x = 0; x < actual[0]; x++) {
                uint64_t value = load_label(row + x * ch->stride[0], ch->itemsize);
                if (value == previous) continue;
                previous = value;
                int added;
                labelset_slot(set, value, &added);
                if (added) uniq[n++] = value;
            }
        }
        sort_labels(uniq, n);
        for (size_t i = 0; i < n; i++) {
            int added;
            set->index[labelset_slot(set, uniq[i], &added)] = (uint32_t)i;
        }
        size_t bits = 0;
        if (n != 1) {
            bits = 1;
            while (((size_t)1 << bits) < n) bits *= 2;
        }
        const size_t packed_words = (bits * block_volume + 31) / 32;
        const size_t values_offset = out->size - base_offset;
        const uint64_t hash = table_hash(uniq, n);
        size_t free_slot = 0;
        int64_t table_offset = cache_find(cache, hash, uniq, n, &free_slot);
        const int write_table = table_offset < 0;
        if (write_table) table_offset = (int64_t)(values_offset + packed_words);
        if (table_offset > 0xffffff || values_offset > 0xffffffffu) return TOO_LARGE;
        if (words_extend(out, packed_words + (write_table ? n * words_per_label : 0)) != 0)
            return NO_MEMORY;
        uint32_t *packed = out->data + base_offset + values_offset;
        if (bits) {
            previous = load_label(origin, ch->itemsize) + 1;
            uint32_t index = 0;
            for (Py_ssize_t z = 0; z < actual[2]; z++)
            for (Py_ssize_t y = 0; y < actual[1]; y++) {
                const char *row = origin + z * ch->stride[2] + y * ch->stride[1];
                size_t position = (size_t)(ch->block[0] * (y + ch->block[1] * z));
                for (Py_ssize_t x = 0; x < actual[0]; x++, position++) {
                    uint64_t value = load_label(row + x * ch->stride[0], ch->itemsize);
                    if (value != previous) {
                        int added;
                        previous = value;
                        index = set->index[labelset_slot(set, value, &added)];
                    }
                    size_t bit = position * bits;
                    packed[bit / 32] |= index << (bit % 32);
                }
            }
        }
        if (write_table) {
            uint32_t *table = packed + packed_words;
            for (size_t i = 0; i < n; i++)
                for (size_t w = 0; w < words_per_label; w++)
                    table[i * words_per_label + w] = (uint32_t)(uniq[i] >> (32 * w));
            cache->hash[free_slot] = hash;
            cache->start[free_slot] = cache->pool_size;
            cache->count[free_slot] = (uint32_t)n;
            cache->offset[free_slot] = (uint32_t)table_offset;
            memcpy(cache->pool + cache->pool_size, uniq, n * sizeof(uint64_t));
            cache->pool_size += n;
        }
        const size_t header = base_offset + 2 * (b[0] + grid[0] * (b[1] + grid[1] * b[2]));
        out->data[header] = (uint32_t)table_offset | (uint32_t)(bits << 24);
        out->data[header + 1] = (uint32_t)values_offset;
    }
    return OK;
}

static PyObject *compress(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *array;
    Py_ssize_t bx, by, bz;
    if (!PyArg_ParseTuple(args, "O(nnn)", &array, &bx, &by, &bz)) return NULL;
    if (bx <= 0 || by <= 0 || bz <= 0) {
        PyErr_SetString(PyExc_ValueError, "block size must be positive");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(array, &view, PyBUF_RECORDS_RO) != 0) return NULL;
    PyObject *result = NULL;
    if (view.ndim != 4 || (view.itemsize != 4 && view.itemsize != 8)) {
        PyErr_SetString(PyExc_ValueError, "expected a 4-D [x, y, z, c] array of 4- or 8-byte labels");
        PyBuffer_Release(&view);
        return NULL;
    }
    const Py_ssize_t channels = view.shape[3];
    const size_t block_volume = (size_t)(bx * by * bz);
    size_t blocks = 1;
    Py_ssize_t block[3] = {bx, by, bz};
    for (int i = 0; i < 3; i++) blocks *= (size_t)((view.shape[i] + block[i] - 1) / block[i]);
    /* A channel holds at most one table per block, each at most a block's voxels long. */
    size_t pool_capacity = view.shape[0] * view.shape[1] * view.shape[2] + blocks;
    LabelSet set = {0};
    TableCache cache = {0};
    set.mask = pow2_at_least(2 * block_volume) - 1;
    cache.mask = pow2_at_least(2 * blocks) - 1;
    set.keys = malloc((set.mask + 1) * sizeof(uint64_t));
    set.stamp = calloc(set.mask + 1, sizeof(uint32_t));
    set.index = malloc((set.mask + 1) * sizeof(uint32_t));
    uint64_t *uniq = malloc(block_volume * sizeof(uint64_t));
    cache.hash = malloc((cache.mask + 1) * sizeof(uint64_t));
    cache.start = malloc((cache.mask + 1) * sizeof(size_t));
    cache.count = malloc((cache.mask + 1) * sizeof(uint32_t));
    cache.offset = malloc((cache.mask + 1) * sizeof(uint32_t));
    cache.pool = malloc(pool_capacity * sizeof(uint64_t));
    Words out = {0};
    int status = OK;
    if (!set.keys || !set.stamp || !set.index || !uniq || !cache.hash || !cache.start ||
        !cache.count || !cache.offset || !cache.pool) {
        status = NO_MEMORY;
    } else {
        Py_BEGIN_ALLOW_THREADS
        status = words_extend(&out, (size_t)channels) == 0 ? OK : NO_MEMORY;
        for (Py_ssize_t c = 0; c < channels && status == OK; c++) {
            if (out.size > 0xffffffffu) {
                status = TOO_LARGE;
                break;
            }
            out.data[c] = (uint32_t)out.size;
            Channel ch = {(const char *)view.buf + c * view.strides[3],
                          {view.strides[0], view.strides[1], view.strides[2]},
                          {view.shape[0], view.shape[1], view.shape[2]},
                          {bx, by, bz},
                          (int)view.itemsize};
            status = encode_channel(&ch, &out, &set, uniq, &cache);
        }
        Py_END_ALLOW_THREADS
    }
    if (status == OK) {
        result = PyBytes_FromStringAndSize((const char *)out.data,
                                           (Py_ssize_t)(out.size * sizeof(uint32_t)));
    } else if (status == TOO_LARGE) {
        PyErr_SetString(PyExc_OverflowError,
                        "compressed_segmentation offsets exceed the format's 24-bit limit");
    } else {
        PyErr_NoMemory();
    }
    free(out.data);
    free(set.keys);
    free(set.stamp);
    free(set.index);
    free(uniq);
    free(cache.hash);
    free(cache.start);
    free(cache.count);
    free(cache.offset);
    free(cache.pool);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"compress", compress, METH_VARARGS,
     "compress(labels_xyzc, (bx, by, bz)) -> bytes: the compressed_segmentation stream."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cseg", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__cseg(void) {
    const uint32_t probe = 1;
    if (*(const uint8_t *)&probe != 1) {
        PyErr_SetString(PyExc_ImportError, "_cseg writes little-endian words: little-endian hosts only");
        return NULL;
    }
    return PyModule_Create(&module);
}
