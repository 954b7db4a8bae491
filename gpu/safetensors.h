/*
 * safetensors.h - the safetensors header parser shared by the daemon and the
 * client library (libmcfs exports it, hence the public mcfs_st_ prefix).
 *
 * File layout: an 8-byte little-endian header length N, N bytes of JSON
 * (an object: tensor name -> {"dtype", "shape", "data_offsets": [begin, end]},
 * plus an optional "__metadata__" object of strings), then the data section.
 * Offsets are relative to the data section.
 *
 * The parser is strict in the same places as the reference implementation,
 * so that a file mcfs accepts is one safetensors accepts: the header is at
 * most 100 MB, every tensor's byte count matches its dtype and shape, the
 * tensors sorted by offset tile the data section exactly (no gap, no
 * overlap, nothing past its end), names are unique, dtypes are known. Each
 * refusal is -EBADMSG with a message naming the tensor and the values.
 *
 * Nothing here logs, and nothing is allocated except what mcfs_st_parse()
 * returns. Thread safe (no state).
 */
#ifndef MCFS_SAFETENSORS_H
#define MCFS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

/* The reference implementation's limit on the JSON header. */
#define MCFS_ST_MAX_HEADER 100000000ull
/* Dimensions per tensor (the reference has no limit; no model needs more). */
#define MCFS_ST_MAX_DIMS 16

enum mcfs_st_dtype {
	MCFS_ST_BOOL,
	MCFS_ST_U8,
	MCFS_ST_I8,
	MCFS_ST_F8_E5M2,
	MCFS_ST_F8_E4M3,
	MCFS_ST_F8_E8M0,
	MCFS_ST_F8_E4M3FNUZ,
	MCFS_ST_F8_E5M2FNUZ,
	MCFS_ST_I16,
	MCFS_ST_U16,
	MCFS_ST_F16,
	MCFS_ST_BF16,
	MCFS_ST_I32,
	MCFS_ST_U32,
	MCFS_ST_F32,
	MCFS_ST_C64,
	MCFS_ST_F64,
	MCFS_ST_I64,
	MCFS_ST_U64,
	MCFS_ST_F4,
	MCFS_ST_F6_E2M3,
	MCFS_ST_F6_E3M2,
	MCFS_ST_NDTYPES,
};

struct mcfs_st_tensor {
	const char *name; /* borrowed from the header: valid until mcfs_st_free() */
	enum mcfs_st_dtype dtype;
	unsigned ndim;
	uint64_t shape[MCFS_ST_MAX_DIMS];
	uint64_t begin, end; /* bytes, relative to the data section; end >= begin */
};

struct mcfs_st_header {
	uint64_t header_len;  /* N: JSON bytes */
	uint64_t data_offset; /* 8 + N: file offset of the data section */
	uint64_t data_len;    /* bytes of the data section */
	size_t ntensors;
	struct mcfs_st_tensor *tensors; /* sorted by begin */
	char *metadata_json;		/* "__metadata__" as compact JSON, or NULL */
};

/*
 * Reads the 8-byte length prefix @first8 of a file of @file_size bytes and
 * returns 0 with the data section's file offset in *data_offset, or -EBADMSG
 * if the length is past the limit or the file.
 */
int mcfs_st_data_offset(const unsigned char first8[8], uint64_t file_size, uint64_t *data_offset)
    __attribute__((warn_unused_result));

/*
 * Parses @len bytes of header JSON (not NUL-terminated; trailing spaces are
 * allowed, as writers pad the header to 8 bytes) for a data section of
 * @data_len bytes. Returns 0 with *out set (caller frees with mcfs_st_free),
 * -EBADMSG with a message in @err, or -ENOMEM. @err may be NULL.
 */
int mcfs_st_parse(const char *json, size_t len, uint64_t data_len, struct mcfs_st_header **out,
		  char *err, size_t errlen) __attribute__((warn_unused_result));

/*
 * Reads and parses the header of the open file @fd (pread, any file system).
 * Returns 0 with *out set (caller frees with mcfs_st_free), -EBADMSG with a
 * message, -ENOMEM, or the negative errno of a failed read.
 */
int mcfs_st_read_fd(int fd, struct mcfs_st_header **out, char *err, size_t errlen)
    __attribute__((warn_unused_result));

void mcfs_st_free(struct mcfs_st_header *h);

/* "BF16" for MCFS_ST_BF16; NULL for a value out of range. */
const char *mcfs_st_dtype_name(enum mcfs_st_dtype d);
/* Bits per element: 4 for F4, 6 for F6_*, else 8 * bytes. */
unsigned mcfs_st_dtype_bits(enum mcfs_st_dtype d);
/* Looks a dtype up by name; returns 0 or -ENOENT. */
int mcfs_st_dtype_from_name(const char *name, enum mcfs_st_dtype *out)
    __attribute__((warn_unused_result));

#endif
