/*
 * cfg_file.c - a config file (-c FILE): INI, "key = value" at the top level
 * or in [mcfs], each value set through cfg_set() as an -o option would be, so
 * that both report a bad value the same way; errors name the file and line.
 */
#define _GNU_SOURCE
#include "cfg.h"

#include <errno.h>
#include <ini.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct ini_ctx {
	struct cfg *c;
	char *err;
	size_t errlen;
	const char *path;
	int rc;
};

/*
 * Debian's libinih passes no line number to handlers; returning 0 makes
 * ini_parse_file() report the line, and the message is finished there.
 */
static int on_ini_line(void *user, const char *section, const char *name, const char *value)
{
	struct ini_ctx *ctx = user;

	if (ctx->rc < 0)
		return 0;
	if (section[0] != '\0' && strcmp(section, "mcfs") != 0) {
		char es[96];

		snprintf(ctx->err, ctx->errlen, "unknown section [%s] (allowed: [mcfs])",
			 mcfs_escape(section, strlen(section), es, sizeof(es)));
		ctx->rc = -EINVAL;
		return 0;
	}
	if (cfg_set(ctx->c, name, value, ctx->err, ctx->errlen) < 0) {
		ctx->rc = -EINVAL;
		return 0;
	}
	return 1;
}

/* CFG_FILE_MAX (cfg.h): a config file is a few hundred bytes, so anything
 * this large is the wrong file, and its contents are never parsed. */

/*
 * Reads the whole of @fp into a new NUL-terminated buffer (caller frees with
 * free()); *len is the byte count, NULs included. Returns 0, -EFBIG past
 * CFG_FILE_MAX bytes (*len: the bytes read, more than the limit), or -errno.
 */
static int read_all(FILE *fp, char **out, size_t *len)
{
	size_t n = 0, cap = 4096;
	char *buf = malloc(cap), *p;

	if (!buf)
		return -ENOMEM;
	for (;;) {
		n += fread(buf + n, 1, cap - n - 1, fp);
		if (ferror(fp)) {
			free(buf);
			return -EIO;
		}
		if (n > CFG_FILE_MAX) {
			free(buf);
			*len = n;
			return -EFBIG;
		}
		if (feof(fp))
			break;
		/* room for one byte past the limit (to see it) and the NUL */
		p = realloc(buf, MCFS_MIN(cap * 2, (size_t)CFG_FILE_MAX + 2));
		if (!p) {
			free(buf);
			return -ENOMEM;
		}
		buf = p;
		cap = MCFS_MIN(cap * 2, (size_t)CFG_FILE_MAX + 2);
	}
	buf[n] = '\0';
	*out = buf;
	*len = n;
	return 0;
}

/*
 * libinih reads lines as C strings: a NUL would end the value there and drop
 * the rest of the line unseen. Refuses the first NUL, naming its line and, if
 * it is in a value, the key. Returns 0 or -EINVAL with the message.
 */
static int refuse_nul(const char *path, const char *buf, size_t len, char *err, size_t errlen)
{
	const char *nul = memchr(buf, '\0', len), *bol = buf, *p, *delim = NULL;
	char ep[160], ek[96], key[96];
	size_t klen;
	int line = 1;

	if (!nul)
		return 0;
	for (p = buf; p < nul; p++) {
		if (*p == '\n') {
			line++;
			bol = p + 1;
		}
	}
	/* the key: what precedes '=' (or ':', which libinih also takes), trimmed */
	for (p = bol; p < nul && !delim; p++)
		if (*p == '=' || *p == ':')
			delim = p;
	mcfs_escape(path, strlen(path), ep, sizeof(ep));
	if (!delim) {
		snprintf(
		    err, errlen,
		    "%s:%d: a NUL byte (a binary file, or UTF-16? a config file is UTF-8 text)", ep,
		    line);
		return -EINVAL;
	}
	for (p = bol; p < delim && (*p == ' ' || *p == '\t'); p++)
		;
	for (klen = (size_t)(delim - p); klen > 0 && (p[klen - 1] == ' ' || p[klen - 1] == '\t');)
		klen--;
	snprintf(key, sizeof(key), "%.*s", (int)MCFS_MIN(klen, sizeof(key) - 1), p);
	snprintf(err, errlen,
		 "%s:%d: the value of %s holds a NUL byte (a binary file, or UTF-16? a config "
		 "file is UTF-8 text)",
		 ep, line, mcfs_escape(key, strlen(key), ek, sizeof(ek)));
	return -EINVAL;
}

int cfg_load_file(struct cfg *c, const char *path, char *err, size_t errlen)
{
	struct ini_ctx ctx = {.c = c, .err = err, .errlen = errlen, .path = path, .rc = 0};
	char ep[160], *text;
	struct stat st;
	size_t len;
	FILE *fp;
	int line, rc;

	mcfs_escape(path, strlen(path), ep, sizeof(ep));
	fp = fopen(path, "r");
	if (!fp) {
		int e = errno;

		snprintf(err, errlen, "cannot read config file %s: %s", ep, strerror(e));
		return -e;
	}
	if (fstat(fileno(fp), &st) == 0 && !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "config file %s is not a regular file", ep);
		fclose(fp);
		return -EINVAL;
	}
	rc = read_all(fp, &text, &len);
	fclose(fp);
	if (rc == -EFBIG) {
		/* fstat's size; a file growing while read is at least what was read */
		uint64_t size = MCFS_MAX((uint64_t)st.st_size, (uint64_t)len);
		char sz[32];

		snprintf(err, errlen,
			 "config file %s is %s (%" PRIu64 " bytes), over the limit of 1 MiB (%d "
			 "bytes) for a config file, which holds a few lines of key = value: is it "
			 "the right file?",
			 ep, mcfs_fmt_bytes(size, sz, sizeof(sz)), size, CFG_FILE_MAX);
		return -EINVAL;
	}
	if (rc < 0) {
		snprintf(err, errlen, "cannot read config file %s: %s", ep, strerror(-rc));
		return rc;
	}
	rc = refuse_nul(ep, text, len, err, errlen);
	if (rc < 0) {
		free(text);
		return rc;
	}
	line = ini_parse_string(text, on_ini_line, &ctx);
	free(text);
	if (ctx.rc < 0) {
		char msg[CFG_ERR_MAX];

		snprintf(msg, sizeof(msg), "%s", err);
		snprintf(err, errlen, "%s:%d: %s", ep, line, msg);
		return ctx.rc;
	}
	if (line != 0) {
		snprintf(err, errlen, "%s:%d: syntax error (expected key = value)", ep, line);
		return -EINVAL;
	}
	return 0;
}
