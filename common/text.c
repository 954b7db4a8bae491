/*
 * text.c - text every message shares: byte counts and rates in binary units,
 * user input made safe to print, and the "did you mean" guess.
 *
 * One unit system: sizes and rates are binary (KiB, MiB, GiB; MiB/s), as the
 * config parser reads them (1M = 1 MiB), so a number a user types and a
 * number mcfs prints never differ by 5%.
 *
 * Escaping: text that came from a user or a store (a config file, a command
 * line, a file name) may hold control bytes (a terminal's escape sequences,
 * a newline that forges a second log line) or bytes that are not UTF-8.
 * Those are written as \n, \t, \r or \xNN; valid UTF-8 (names in any
 * language) passes unchanged. A backslash is kept as it is: messages are
 * for people, and a reader can tell "\x1b" from a name that holds it.
 */
#include "mcfs.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

const char *mcfs_fmt_bytes(unsigned long long bytes, char *buf, unsigned long len)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)bytes;
	unsigned u = 0;

	while (v >= 1024.0 && u + 1 < MCFS_ARRAY_SIZE(units)) {
		v /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu B", bytes);
	else
		snprintf(buf, len, "%.1f %s", v, units[u]);
	return buf;
}

const char *mcfs_fmt_rate(double bytes_per_s, char *buf, unsigned long len)
{
	static const char *const units[] = {"B/s", "KiB/s", "MiB/s", "GiB/s", "TiB/s"};
	double v = bytes_per_s > 0 ? bytes_per_s : 0;
	unsigned u = 0;

	while (v >= 1024.0 && u + 1 < MCFS_ARRAY_SIZE(units)) {
		v /= 1024.0;
		u++;
	}
	snprintf(buf, len, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
	return buf;
}

/*
 * Length of the valid UTF-8 sequence at @s (at most @n bytes), or 0 if
 * there is none. Overlong forms, surrogates and C1 controls (U+0080 to
 * U+009F: some terminals act on them) count as invalid.
 */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	size_t len, i;
	unsigned char lo = 0x80, hi = 0xbf;

	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		len = 2;
		if (s[0] == 0xc2)
			lo = 0xa0; /* U+0080..U+009F: C1 controls */
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		len = 3;
		if (s[0] == 0xe0)
			lo = 0xa0; /* overlong */
		else if (s[0] == 0xed)
			hi = 0x9f; /* surrogates */
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		len = 4;
		if (s[0] == 0xf0)
			lo = 0x90; /* overlong */
		else if (s[0] == 0xf4)
			hi = 0x8f; /* above U+10FFFF */
	} else {
		return 0;
	}
	if (n < len || s[1] < lo || s[1] > hi)
		return 0;
	for (i = 2; i < len; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return len;
}

const char *mcfs_escape(const char *in, size_t inlen, char *out, size_t outlen)
{
	const unsigned char *s = (const unsigned char *)in;
	size_t i = 0, o = 0, cut = 0, step, plen;
	char piece[8];

	if (outlen == 0)
		return out;
	while (i < inlen) {
		step = utf8_len(s + i, inlen - i);
		if (s[i] >= 0x20 && s[i] < 0x7f) {
			piece[0] = (char)s[i];
			step = plen = 1;
		} else if (step > 0) {
			memcpy(piece, s + i, step);
			plen = step;
		} else {
			step = 1;
			if (s[i] == '\n')
				plen = (size_t)snprintf(piece, sizeof(piece), "\\n");
			else if (s[i] == '\t')
				plen = (size_t)snprintf(piece, sizeof(piece), "\\t");
			else if (s[i] == '\r')
				plen = (size_t)snprintf(piece, sizeof(piece), "\\r");
			else
				plen = (size_t)snprintf(piece, sizeof(piece), "\\x%02x", s[i]);
		}
		if (o + plen >= outlen) {
			/* cut between pieces, never inside an escape or a character */
			snprintf(out + cut, outlen - cut, "...");
			return out;
		}
		memcpy(out + o, piece, plen);
		o += plen;
		i += step;
		if (o + 3 < outlen)
			cut = o; /* "..." still fits after this piece */
	}
	out[o] = '\0';
	return out;
}

/* Levenshtein distance of two short words; ~0u when either is 32 bytes or longer. */
static unsigned distance(const char *a, const char *b)
{
	unsigned row[32], i, j, prev, tmp;
	size_t la = strlen(a), lb = strlen(b);

	if (la >= MCFS_ARRAY_SIZE(row) || lb >= MCFS_ARRAY_SIZE(row))
		return ~0u;
	for (j = 0; j <= lb; j++)
		row[j] = j;
	for (i = 1; i <= la; i++) {
		prev = row[0];
		row[0] = i;
		for (j = 1; j <= lb; j++) {
			tmp = row[j];
			row[j] = MCFS_MIN(MCFS_MIN(row[j] + 1, row[j - 1] + 1),
					  prev + (a[i - 1] != b[j - 1]));
			prev = tmp;
		}
	}
	return row[lb];
}

const char *mcfs_nearest(const char *word, const char *const *names, size_t n)
{
	unsigned best = 3, d; /* at most 2 edits: a typo, not another word */
	const char *hit = NULL;
	size_t i;

	for (i = 0; i < n; i++) {
		d = distance(word, names[i]);
		if (d < best) {
			best = d;
			hit = names[i];
		}
	}
	return hit;
}

int mcfs_read_line(const char *path, char *buf, size_t len)
{
	FILE *fp = fopen(path, "re");
	int rc = 0;

	if (!fp)
		return -errno;
	if (!fgets(buf, (int)len, fp))
		rc = -EIO;
	fclose(fp);
	buf[strcspn(buf, "\n")] = '\0';
	return rc;
}
