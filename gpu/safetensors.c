/*
 * safetensors.c - parses and validates a safetensors header (see
 * safetensors.h for the format and the rules).
 *
 * JSON is cJSON's job; this file only walks the tree it builds. Numbers in
 * cJSON are doubles, so every shape and offset is checked to be an integer
 * no larger than 2^53 (9 PB) before it is used; all products and sums are
 * overflow-checked. Validation runs in two passes: each tensor on its own
 * (dtype, shape, size), then all of them sorted by offset (tiling and
 * uniqueness), so that the error names the first tensor at fault.
 */
#define _GNU_SOURCE
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Largest integer a double holds exactly: bigger JSON numbers are refused. */
#define EXACT_MAX 9007199254740992.0

static const struct {
	const char *name;
	unsigned bits;
} dtypes[MCFS_ST_NDTYPES] = {
    [MCFS_ST_BOOL] = {"BOOL", 8},
    [MCFS_ST_U8] = {"U8", 8},
    [MCFS_ST_I8] = {"I8", 8},
    [MCFS_ST_F8_E5M2] = {"F8_E5M2", 8},
    [MCFS_ST_F8_E4M3] = {"F8_E4M3", 8},
    [MCFS_ST_F8_E8M0] = {"F8_E8M0", 8},
    [MCFS_ST_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8},
    [MCFS_ST_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8},
    [MCFS_ST_I16] = {"I16", 16},
    [MCFS_ST_U16] = {"U16", 16},
    [MCFS_ST_F16] = {"F16", 16},
    [MCFS_ST_BF16] = {"BF16", 16},
    [MCFS_ST_I32] = {"I32", 32},
    [MCFS_ST_U32] = {"U32", 32},
    [MCFS_ST_F32] = {"F32", 32},
    [MCFS_ST_C64] = {"C64", 64},
    [MCFS_ST_F64] = {"F64", 64},
    [MCFS_ST_I64] = {"I64", 64},
    [MCFS_ST_U64] = {"U64", 64},
    [MCFS_ST_F4] = {"F4", 4},
    [MCFS_ST_F6_E2M3] = {"F6_E2M3", 6},
    [MCFS_ST_F6_E3M2] = {"F6_E3M2", 6},
};

const char *mcfs_st_dtype_name(enum mcfs_st_dtype d)
{
	if ((unsigned)d >= MCFS_ST_NDTYPES)
		return NULL;
	return dtypes[d].name;
}

unsigned mcfs_st_dtype_bits(enum mcfs_st_dtype d)
{
	if ((unsigned)d >= MCFS_ST_NDTYPES)
		return 0;
	return dtypes[d].bits;
}

int mcfs_st_dtype_from_name(const char *name, enum mcfs_st_dtype *out)
{
	unsigned i;

	for (i = 0; i < MCFS_ST_NDTYPES; i++) {
		if (strcmp(dtypes[i].name, name) == 0) {
			*out = (enum mcfs_st_dtype)i;
			return 0;
		}
	}
	return -ENOENT;
}

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -EBADMSG;
}

int mcfs_st_data_offset(const unsigned char first8[8], uint64_t file_size, uint64_t *data_offset)
{
	uint64_t n = 0;
	int i;

	for (i = 7; i >= 0; i--)
		n = (n << 8) | first8[i];
	if (file_size < 8 || n > MCFS_ST_MAX_HEADER || n > file_size - 8)
		return -EBADMSG;
	*data_offset = 8 + n;
	return 0;
}

/* A JSON number that is a non-negative integer held exactly. */
static bool get_u64(const cJSON *v, uint64_t *out)
{
	double d;

	if (!cJSON_IsNumber(v))
		return false;
	d = v->valuedouble;
	if (!(d >= 0.0) || d > EXACT_MAX || d != (double)(uint64_t)d)
		return false;
	*out = (uint64_t)d;
	return true;
}

static int parse_shape(const cJSON *shape, struct mcfs_st_tensor *t, char *err, size_t errlen)
{
	const cJSON *dim;
	unsigned n = 0;

	if (!cJSON_IsArray(shape))
		return fail(err, errlen, "tensor '%s': \"shape\" is not an array", t->name);
	cJSON_ArrayForEach(dim, shape)
	{
		if (n == MCFS_ST_MAX_DIMS)
			return fail(err, errlen, "tensor '%s': more than %d dimensions", t->name,
				    MCFS_ST_MAX_DIMS);
		if (!get_u64(dim, &t->shape[n]))
			return fail(err, errlen,
				    "tensor '%s': shape[%u] is not a non-negative integer", t->name,
				    n);
		n++;
	}
	t->ndim = n;
	return 0;
}

/* Checks one tensor on its own: fields, dtype, and that its bytes match its shape. */
static int parse_tensor(const cJSON *item, uint64_t data_len, struct mcfs_st_tensor *t, char *err,
			size_t errlen)
{
	const cJSON *dtype, *offs, *b, *e;
	uint64_t numel = 1, bits, bytes;
	unsigned i;
	int rc;

	t->name = item->string;
	if (!cJSON_IsObject(item))
		return fail(err, errlen, "tensor '%s': entry is not an object", t->name);
	dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
	if (!cJSON_IsString(dtype))
		return fail(err, errlen, "tensor '%s': missing or non-string \"dtype\"", t->name);
	if (mcfs_st_dtype_from_name(dtype->valuestring, &t->dtype) < 0)
		return fail(err, errlen, "tensor '%s': unknown dtype \"%.32s\"", t->name,
			    dtype->valuestring);
	rc = parse_shape(cJSON_GetObjectItemCaseSensitive(item, "shape"), t, err, errlen);
	if (rc < 0)
		return rc;
	offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
	if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
		return fail(err, errlen, "tensor '%s': \"data_offsets\" is not [begin, end]",
			    t->name);
	b = cJSON_GetArrayItem(offs, 0);
	e = cJSON_GetArrayItem(offs, 1);
	if (!get_u64(b, &t->begin) || !get_u64(e, &t->end))
		return fail(err, errlen, "tensor '%s': data_offsets are not non-negative integers",
			    t->name);
	if (t->end < t->begin)
		return fail(err, errlen, "tensor '%s': data_offsets [%llu, %llu] end before begin",
			    t->name, (unsigned long long)t->begin, (unsigned long long)t->end);
	if (t->end > data_len)
		return fail(err, errlen,
			    "tensor '%s': data_offsets [%llu, %llu] past the data section (%llu "
			    "bytes)",
			    t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
			    (unsigned long long)data_len);
	for (i = 0; i < t->ndim; i++)
		if (__builtin_mul_overflow(numel, t->shape[i], &numel))
			return fail(err, errlen, "tensor '%s': shape overflows", t->name);
	bits = mcfs_st_dtype_bits(t->dtype);
	if (__builtin_mul_overflow(numel, bits, &bits))
		return fail(err, errlen, "tensor '%s': shape overflows", t->name);
	if (bits % 8)
		return fail(err, errlen, "tensor '%s': %llu elements of %s are not whole bytes",
			    t->name, (unsigned long long)numel, dtypes[t->dtype].name);
	bytes = bits / 8;
	if (bytes != t->end - t->begin)
		return fail(
		    err, errlen,
		    "tensor '%s': %s shape needs %llu bytes, data_offsets [%llu, %llu] hold "
		    "%llu",
		    t->name, dtypes[t->dtype].name, (unsigned long long)bytes,
		    (unsigned long long)t->begin, (unsigned long long)t->end,
		    (unsigned long long)(t->end - t->begin));
	return 0;
}

static int by_offset(const void *a, const void *b)
{
	const struct mcfs_st_tensor *x = a, *y = b;

	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int by_name(const void *a, const void *b)
{
	const struct mcfs_st_tensor *const *x = a, *const *y = b;

	return strcmp((*x)->name, (*y)->name);
}

/* The tensors, sorted, must tile [0, data_len) and have unique names. */
static int check_layout(struct mcfs_st_header *h, char *err, size_t errlen)
{
	struct mcfs_st_tensor **names;
	uint64_t at = 0;
	size_t i;
	int rc = 0;

	qsort(h->tensors, h->ntensors, sizeof(*h->tensors), by_offset);
	for (i = 0; i < h->ntensors; i++) {
		if (h->tensors[i].begin != at)
			return fail(err, errlen,
				    "tensor '%s': data_offsets [%llu, %llu] %s the previous tensor "
				    "(which ends at %llu)",
				    h->tensors[i].name, (unsigned long long)h->tensors[i].begin,
				    (unsigned long long)h->tensors[i].end,
				    h->tensors[i].begin < at ? "overlap" : "leave a gap after",
				    (unsigned long long)at);
		at = h->tensors[i].end;
	}
	if (at != h->data_len)
		return fail(err, errlen, "tensors cover %llu bytes of a %llu-byte data section",
			    (unsigned long long)at, (unsigned long long)h->data_len);
	if (h->ntensors < 2)
		return 0;
	names = malloc(h->ntensors * sizeof(*names));
	if (!names)
		return -ENOMEM;
	for (i = 0; i < h->ntensors; i++)
		names[i] = &h->tensors[i];
	qsort(names, h->ntensors, sizeof(*names), by_name);
	for (i = 1; i < h->ntensors && rc == 0; i++)
		if (strcmp(names[i - 1]->name, names[i]->name) == 0)
			rc = fail(err, errlen, "tensor '%s' appears twice", names[i]->name);
	free(names);
	return rc;
}

static int check_metadata(const cJSON *md, struct mcfs_st_header *h, char *err, size_t errlen)
{
	const cJSON *v;

	if (!cJSON_IsObject(md))
		return fail(err, errlen, "\"__metadata__\" is not an object");
	cJSON_ArrayForEach(v, md)
	{
		if (!cJSON_IsString(v))
			return fail(err, errlen, "\"__metadata__\" value of '%s' is not a string",
				    v->string);
	}
	h->metadata_json = cJSON_PrintUnformatted(md);
	return h->metadata_json ? 0 : -ENOMEM;
}

static int trailing_is_space(const char *p, const char *end)
{
	for (; p < end; p++)
		if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r' && *p != '\0')
			return 0;
	return 1;
}

/* Walks the parsed root object. On error the caller frees @h. */
static int walk(cJSON *root, struct mcfs_st_header *h, char *err, size_t errlen)
{
	const cJSON *item;
	size_t n = 0;
	int rc;

	if (!cJSON_IsObject(root))
		return fail(err, errlen, "header is not a JSON object");
	cJSON_ArrayForEach(item, root) n++;
	h->tensors = calloc(n ? n : 1, sizeof(*h->tensors));
	if (!h->tensors)
		return -ENOMEM;
	cJSON_ArrayForEach(item, root)
	{
		if (strcmp(item->string, "__metadata__") == 0) {
			if (h->metadata_json)
				return fail(err, errlen, "\"__metadata__\" appears twice");
			rc = check_metadata(item, h, err, errlen);
		} else {
			rc = parse_tensor(item, h->data_len, &h->tensors[h->ntensors++], err,
					  errlen);
		}
		if (rc < 0)
			return rc;
	}
	return check_layout(h, err, errlen);
}

/*
 * Names point into the cJSON tree, which is kept inside the header's single
 * allocation block: the tree is freed with the header, and the tensors'
 * names stay valid as long as the header lives.
 */
struct st_owner {
	struct mcfs_st_header h; /* first: mcfs_st_free() casts back */
	cJSON *root;
};

int mcfs_st_parse(const char *json, size_t len, uint64_t data_len, struct mcfs_st_header **out,
		  char *err, size_t errlen)
{
	const char *end = NULL;
	struct st_owner *o;
	int rc;

	if (err && errlen)
		err[0] = '\0';
	if (len > MCFS_ST_MAX_HEADER)
		return fail(err, errlen, "header of %zu bytes is over the %llu-byte limit", len,
			    MCFS_ST_MAX_HEADER);
	o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	o->h.header_len = len;
	o->h.data_offset = 8 + len;
	o->h.data_len = data_len;
	o->root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
	if (!o->root) {
		end = cJSON_GetErrorPtr();
		rc = fail(err, errlen, "header is not valid JSON (at byte %lld of %zu)",
			  end && end >= json && end <= json + len ? (long long)(end - json) : -1LL,
			  len);
	} else if (!trailing_is_space(end, json + len)) {
		rc = fail(err, errlen, "header has data after its JSON object (at byte %lld)",
			  (long long)(end - json));
	} else {
		rc = walk(o->root, &o->h, err, errlen);
	}
	if (rc < 0) {
		mcfs_st_free(&o->h);
		return rc;
	}
	*out = &o->h;
	return 0;
}

void mcfs_st_free(struct mcfs_st_header *h)
{
	struct st_owner *o = (struct st_owner *)h;

	if (!h)
		return;
	cJSON_Delete(o->root);
	cJSON_free(h->metadata_json);
	free(h->tensors);
	free(o);
}

static int pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	char *p = buf;
	ssize_t n;

	while (len) {
		n = pread(fd, p, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EBADMSG;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

int mcfs_st_read_fd(int fd, struct mcfs_st_header **out, char *err, size_t errlen)
{
	unsigned char first8[8];
	uint64_t size, doff;
	off_t end;
	char *json;
	int rc;

	end = lseek(fd, 0, SEEK_END);
	if (end < 0)
		return -errno;
	size = (uint64_t)end;
	if (size < 8)
		return fail(err, errlen, "file of %llu bytes is too short for a safetensors header",
			    (unsigned long long)size);
	rc = pread_full(fd, first8, 8, 0);
	if (rc < 0)
		return rc;
	if (mcfs_st_data_offset(first8, size, &doff) < 0)
		return fail(err, errlen,
			    "header length prefix does not fit a %llu-byte file (or is over %llu)",
			    (unsigned long long)size, MCFS_ST_MAX_HEADER);
	json = malloc(doff - 8 ? doff - 8 : 1);
	if (!json)
		return -ENOMEM;
	rc = pread_full(fd, json, doff - 8, 8);
	if (rc == 0)
		rc = mcfs_st_parse(json, doff - 8, size - doff, out, err, errlen);
	free(json);
	return rc;
}
