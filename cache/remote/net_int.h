/*
 * net_int.h - pure helpers of the http and s3 backends (parsers, credential
 * lookup), shared between their .c files and their unit tests. Not for use
 * outside cache/remote/. Nothing here does I/O on the network.
 */
#ifndef MCFS_NET_INT_H
#define MCFS_NET_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "remote_int.h"

/* ---- s3.c / s3_xml.c ---- */

/* One page of a ListObjectsV2 answer, appended to by remote_s3_parse_list(). */
struct remote_s3_page {
	struct cache_dirent *ents; /* caller frees with free() */
	size_t n, cap;
	bool truncated;	  /* IsTruncated */
	char token[2048]; /* NextContinuationToken; "" if none */
	char code[64];	  /* <Error><Code>, "" if not an error document */
	unsigned refused; /* keys dropped because they would escape the mount */
};

/*
 * Parses a ListObjectsV2 (or <Error>) document. Keys and CommonPrefixes are
 * made relative to @prefix (the listed directory's key prefix, '/'-ended or
 * ""); the directory marker (key == prefix) is skipped; names that are empty,
 * "." or "..", hold a '/', are 256 bytes or longer, or come from a key too
 * long to keep whole are refused (counted in page->refused, logged).
 * Returns 0, -EIO for malformed XML, -ENOMEM.
 */
MCFS_MUST_CHECK int remote_s3_parse_list(const char *xml, size_t len, const char *prefix,
					 struct remote_s3_page *page);

/* An S3 error document (<Error>): the fields its messages quote. */
struct remote_s3_error {
	char code[64];	    /* <Code>: "AccessDenied" */
	char message[256];  /* <Message>, cut to fit */
	char region[64];    /* <Region>: the bucket's (AuthorizationHeaderMalformed); "" if none */
	char endpoint[256]; /* <Endpoint>: where to send it (PermanentRedirect); "" if none */
};

/*
 * Parses an S3 error document: its root is <Error> and it has a <Code>. A
 * document cut short (a capped body) still gives the fields read before the
 * cut. Returns 0 with out filled, -EINVAL if @xml is not one (not logged: an
 * error answer's body may be anything), -ENOMEM.
 */
MCFS_MUST_CHECK int remote_s3_parse_error(const char *xml, size_t len, struct remote_s3_error *out);

/*
 * The URL of a bucket, no trailing '/': @endpoint (an http(s) URL; "" =
 * AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else AWS's for @region) with
 * the bucket in the path, or in the host name when @virtual_host. Returns 0,
 * -EINVAL for an endpoint that is not a URL (logged), -ENAMETOOLONG.
 */
MCFS_MUST_CHECK int remote_s3_base_url(const char *endpoint, const char *bucket, const char *region,
				       bool virtual_host, char *out, size_t outlen);

struct remote_creds {
	char access_key[256];
	char secret_key[256];
	char session_token[2048];
	/* where they came from, for the log: "the environment", "profile 'p' in FILE", ...;
	 * room for a profile name and a path as long as a config value; longer is cut ("...") */
	char source[CFG_STR_MAX + 192];
};

/*
 * Reads [profile] from an AWS shared credentials file (INI). Returns 0 with
 * keys filled, -ENOENT if the file or profile is missing or has no keys,
 * -EINVAL if the file does not parse.
 */
MCFS_MUST_CHECK int remote_aws_profile_load(const char *file, const char *profile,
					    struct remote_creds *out);

/*
 * One S3 bucket's settings as the options give them: the store's (url,
 * endpoint, region, ...) or the shared tier's (shared_*). Only what a
 * request needs; strings borrowed for the call that takes the struct.
 */
struct remote_s3_conf {
	const char *url;	/* s3://bucket[/prefix] */
	const char *endpoint;	/* "" = AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else AWS's */
	const char *region;	/* for SigV4 and AWS's endpoint */
	const char *addressing; /* "path" (endpoint/bucket/key) or "virtual" (bucket.endpoint) */
	const char *profile;	/* ~/.aws/credentials profile; "" = AWS_PROFILE or default */
	const char *access_key, *secret_key, *session_token; /* "" = environment or profile */
	bool anonymous;	 /* unsigned: no credentials looked for */
	const char *who; /* names the bucket's user in log lines: "s3", "shared cache" */
};

/*
 * Resolves credentials: @conf's keys, then AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY
 * (/AWS_SESSION_TOKEN), then the profile (conf->profile, AWS_PROFILE or
 * "default") in AWS_SHARED_CREDENTIALS_FILE or $HOME/.aws/credentials.
 * Returns 0, or -ENOENT when none are found.
 */
MCFS_MUST_CHECK int remote_creds_resolve(const struct remote_s3_conf *conf,
					 struct remote_creds *out);

/* ---- manifest.c: the http store's JSON listing ---- */

struct remote_manifest;

/*
 * Parses a manifest (see manifest.h for the format). Entries that can't be
 * shown (a path that would escape the mount, a part of 256 bytes or more, a NUL
 * in a path or target) are refused and logged; a path listed twice is kept
 * once (a file over a directory), logged. Returns 0 with *out set (free with
 * remote_manifest_free()), or -EINVAL / -ENOMEM.
 */
MCFS_MUST_CHECK int remote_manifest_parse(const char *json, size_t len,
					  struct remote_manifest **out);
void remote_manifest_free(struct remote_manifest *m);

/* Looks a path up. Returns 0 with attr (and symlink target, if any) or -ENOENT. */
MCFS_MUST_CHECK int remote_manifest_stat(const struct remote_manifest *m, const char *path,
					 struct cache_attr *attr, const char **target);

/* Lists a directory: 0 with a malloc'd array, -ENOENT, -ENOTDIR, -ENOMEM. */
MCFS_MUST_CHECK int remote_manifest_list(const struct remote_manifest *m, const char *path,
					 struct cache_dirent **out, size_t *n);

/* Number of entries (files, dirs, links). */
size_t remote_manifest_count(const struct remote_manifest *m);

/*
 * Parses one nginx autoindex JSON page into entries. They carry no version:
 * the server's own validator comes from a HEAD when a file is opened, never
 * from a guess. Entries that can't be shown (a NUL in the name, a name of 256
 * bytes or more, '/', ".", "..", neither file nor directory) are dropped, each
 * logged naming @what (the listing's URL, for the log). On success *out is an
 * array of *n entries (caller frees with free()). Returns 0, -EINVAL (not a
 * JSON array), -ENOMEM.
 */
MCFS_MUST_CHECK int remote_autoindex_parse(const char *json, size_t len, const char *what,
					   struct cache_dirent **out, size_t *n);

#endif
