/*
 * fetch_text.c - the text helpers of the fetch layer that the http and s3
 * backends and their unit tests share: SigV4's percent-encoding and
 * canonical query strings, bounded string copies, ISO 8601 dates. Pure
 * functions; split from fetch.c, which keeps the transfers.
 */
#define _GNU_SOURCE
#include "fetch_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int remote_uri_encode(const char *in, bool keep_slash, char *out, size_t outlen)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;
	const unsigned char *p;

	for (p = (const unsigned char *)in; *p; p++) {
		bool plain = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
			     (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' || *p == '_' ||
			     *p == '~' || (keep_slash && *p == '/');

		if (o + (plain ? 1 : 3) >= outlen)
			return -ENAMETOOLONG;
		if (plain) {
			out[o++] = (char)*p;
		} else {
			out[o++] = '%';
			out[o++] = hex[*p >> 4];
			out[o++] = hex[*p & 15];
		}
	}
	if (o >= outlen)
		return -ENAMETOOLONG;
	out[o] = '\0';
	return (int)o;
}

struct kvpair {
	const char *k, *v;
};

static int kv_cmp(const void *a, const void *b)
{
	return strcmp(((const struct kvpair *)a)->k, ((const struct kvpair *)b)->k);
}

int remote_query_build(const char *const *kv, size_t n, char *out, size_t outlen)
{
	struct kvpair pairs[16];
	size_t i, o = 0;
	int len;

	if (n > MCFS_ARRAY_SIZE(pairs))
		return -E2BIG;
	for (i = 0; i < n; i++) {
		pairs[i].k = kv[2 * i];
		pairs[i].v = kv[2 * i + 1];
	}
	/* SigV4 sorts by the encoded key; our keys are plain ASCII, so equal. */
	qsort(pairs, n, sizeof(pairs[0]), kv_cmp);
	if (outlen == 0)
		return -ENAMETOOLONG;
	out[0] = '\0';
	for (i = 0; i < n; i++) {
		if (i > 0) {
			if (o + 1 >= outlen)
				return -ENAMETOOLONG;
			out[o++] = '&';
		}
		len = remote_uri_encode(pairs[i].k, false, out + o, outlen - o);
		if (len < 0)
			return len;
		o += (size_t)len;
		if (o + 1 >= outlen)
			return -ENAMETOOLONG;
		out[o++] = '=';
		out[o] = '\0';
		len = remote_uri_encode(pairs[i].v ? pairs[i].v : "", false, out + o, outlen - o);
		if (len < 0)
			return len;
		o += (size_t)len;
	}
	return (int)o;
}

void remote_copy(char *dst, size_t dstlen, const char *src)
{
	size_t n = strlen(src);

	if (dstlen == 0)
		return;
	if (n >= dstlen)
		n = dstlen - 1;
	memcpy(dst, src, n);
	dst[n] = '\0';
}

int remote_parse_iso8601(const char *s, int64_t *ns)
{
	struct tm tm;
	char *end;
	long frac_ns = 0, scale = 100000000;
	time_t t;

	memset(&tm, 0, sizeof(tm));
	end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!end)
		return -EINVAL;
	if (*end == '.') {
		for (end++; *end >= '0' && *end <= '9'; end++) {
			frac_ns += (*end - '0') * scale;
			scale /= 10;
		}
	}
	if (*end != 'Z' && *end != '\0' && strcmp(end, "+00:00") != 0)
		return -EINVAL;
	t = timegm(&tm);
	if (t == (time_t)-1)
		return -EINVAL;
	*ns = (int64_t)t * 1000000000 + frac_ns;
	return 0;
}
