/*
 * shared_seal.c - the cluster key (shared_key_file) and the trailer that seals
 * each block of the shared tier with it (shared.h). Unit-tested in
 * shared_test.c.
 *
 * Why a key: anyone who may write to the bucket (its credentials are on
 * every node, in backups, in CI) could otherwise put any bytes under a
 * block's name with a trailer computed as we compute it, and every node
 * would serve them, and keep them in its disk tier. The trailer is therefore
 * a MAC keyed by a secret that only the cluster's nodes hold: HMAC-SHA256
 * (OpenSSL's libcrypto, the library curl already brings), over the object's
 * name, the block's length and its bytes. The name is in it so that an
 * object copied or renamed to another block's name is refused; the length,
 * so that no two (name, bytes) inputs are the same message.
 *
 * The trailer (48 bytes): "MCFSBLK2", the block's length (little-endian, 8
 * bytes), the MAC (32 bytes). In the object itself, not in x-amz-meta
 * headers, so that any S3-compatible service, a proxy or a copy tool keeps
 * it, and the object proves itself.
 *
 * The key file: its bytes, less trailing newlines and spaces (so that a key
 * written by `echo` or a Kubernetes secret reads the same on every node), at
 * least 32 of them, at most 4096; a regular file that nobody but its owner
 * may read or write. The key is kept in the seal only, cleared when freed,
 * and never logged.
 *
 * Threads: a seal is read-only once made; every call may run in many threads
 * at once (each MAC has a context of its own; the EVP_MAC is shared, as
 * OpenSSL allows).
 */
#define _GNU_SOURCE
#include "shared.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#define TRAILER_MAGIC "MCFSBLK2"
#define MAC_LEN 32 /* SHA-256 */
#define KEY_FILE_MAX 4096

_Static_assert(CACHE_SHARED_TRAILER == 8 + 8 + MAC_LEN, "trailer: magic, length, MAC");

struct cache_shared_seal {
	EVP_MAC *mac; /* HMAC, fetched once */
	size_t len;
	unsigned char key[KEY_FILE_MAX]; /* the first len bytes; cleared on free */
};

static void put_le64(unsigned char *p, uint64_t v)
{
	int i;

	for (i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le64(const unsigned char *p)
{
	uint64_t v = 0;
	int i;

	for (i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

int cache_shared_seal_new(const void *key, size_t len, struct cache_shared_seal **out)
{
	struct cache_shared_seal *s;

	if (len < CACHE_SHARED_KEY_MIN || len > KEY_FILE_MAX)
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	if (!s->mac) {
		free(s);
		return -ENOSYS;
	}
	memcpy(s->key, key, len);
	s->len = len;
	*out = s;
	return 0;
}

void cache_shared_seal_free(struct cache_shared_seal *s)
{
	if (!s)
		return;
	EVP_MAC_free(s->mac);
	OPENSSL_cleanse(s->key, sizeof(s->key));
	free(s);
}

/* Reads the key file open at @fd (@path for messages) into @buf; its length, or -errno (logged). */
static ssize_t read_key_file(int fd, const char *path, unsigned char *buf)
{
	struct stat st;
	ssize_t n, got = 0;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		MCFS_ERR("shared_key_file %s: not a regular file", path);
		return -EINVAL;
	}
	if (st.st_mode & (S_IRWXG | S_IRWXO)) {
		MCFS_ERR("shared_key_file %s: group or others may read or write it (mode %04o): "
			 "the key must be its owner's alone (chmod 600 it; in Kubernetes, "
			 "the secret volume's defaultMode: 0400)",
			 path, (unsigned)(st.st_mode & 07777));
		return -EPERM;
	}
	if (st.st_size > KEY_FILE_MAX) {
		MCFS_ERR("shared_key_file %s: %lld bytes, more than a key file holds (%d at most)",
			 path, (long long)st.st_size, KEY_FILE_MAX);
		return -EINVAL;
	}
	while (got < KEY_FILE_MAX) {
		n = read(fd, buf + got, KEY_FILE_MAX - (size_t)got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			MCFS_ERR("shared_key_file %s: %s", path, strerror(errno));
			return -EIO;
		}
		if (n == 0)
			break;
		got += n;
	}
	return got;
}

int cache_shared_seal_load(const char *path, struct cache_shared_seal **out)
{
	unsigned char buf[KEY_FILE_MAX];
	ssize_t n;
	int fd, rc;

	/* O_NONBLOCK: a FIFO put there is refused (not a regular file), not waited on */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		rc = -errno;
		MCFS_ERR("shared_key_file %s: %s", path, strerror(-rc));
		return rc;
	}
	n = read_key_file(fd, path, buf);
	close(fd);
	if (n < 0)
		return (int)n;
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' ||
			 buf[n - 1] == '\t'))
		n--;
	if (n < CACHE_SHARED_KEY_MIN) {
		OPENSSL_cleanse(buf, sizeof(buf));
		MCFS_ERR("shared_key_file %s: %zd bytes (less trailing newlines and spaces); the "
			 "cluster's key needs at least %d (for example: openssl rand -hex 32 > %s)",
			 path, n, CACHE_SHARED_KEY_MIN, path);
		return -EINVAL;
	}
	rc = cache_shared_seal_new(buf, (size_t)n, out);
	OPENSSL_cleanse(buf, sizeof(buf));
	if (rc < 0)
		MCFS_ERR("shared_key_file %s: %s", path,
			 rc == -ENOSYS ? "this libcrypto has no HMAC" : strerror(-rc));
	return rc;
}

/* The MAC of the block (@key, @len bytes at @data) into @out. 0, or -ENOMEM. */
static int mac_of(const struct cache_shared_seal *s, const char *key, const void *data,
		  uint32_t len, unsigned char out[MAC_LEN])
{
	OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0),
			       OSSL_PARAM_construct_end()};
	unsigned char le[8];
	EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(s->mac);
	size_t n = 0;
	int ok;

	put_le64(le, len);
	/* the name with its NUL: a name never holds one, so name and length stay apart */
	ok = ctx && EVP_MAC_init(ctx, s->key, s->len, params) &&
	     EVP_MAC_update(ctx, (const unsigned char *)key, strlen(key) + 1) &&
	     EVP_MAC_update(ctx, le, sizeof(le)) && EVP_MAC_update(ctx, data, len) &&
	     EVP_MAC_final(ctx, out, &n, MAC_LEN) && n == MAC_LEN;
	EVP_MAC_CTX_free(ctx);
	return ok ? 0 : -ENOMEM;
}

int cache_shared_trailer(const struct cache_shared_seal *s, const char *key, const void *data,
			 uint32_t len, unsigned char out[CACHE_SHARED_TRAILER])
{
	memcpy(out, TRAILER_MAGIC, 8);
	put_le64(out + 8, len);
	return mac_of(s, key, data, len, out + 16);
}

int cache_shared_verify(const struct cache_shared_seal *s, const char *key, const void *data,
			uint32_t len, const unsigned char trailer[CACHE_SHARED_TRAILER],
			const char **why)
{
	unsigned char mac[MAC_LEN];
	int rc;

	if (memcmp(trailer, TRAILER_MAGIC, 8) != 0) {
		*why = "no mcfs trailer at its end";
		return -EBADMSG;
	}
	if (get_le64(trailer + 8) != len) {
		*why = "its trailer gives another length";
		return -EBADMSG;
	}
	rc = mac_of(s, key, data, len, mac);
	if (rc < 0) {
		*why = "no memory to check it";
		return rc;
	}
	if (CRYPTO_memcmp(mac, trailer + 16, MAC_LEN) != 0) {
		*why =
		    "not sealed with this node's shared_key_file (forged, written by a node with "
		    "another key, or damaged)";
		return -EKEYREJECTED;
	}
	return 0;
}
