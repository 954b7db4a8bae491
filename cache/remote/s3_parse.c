/*
 * s3_parse.c - the pure parts of the s3 backend: ListObjectsV2 XML (expat)
 * and AWS credentials lookup (environment, shared credentials file via inih).
 *
 * Design: the XML handler tracks the element path with a small stack and
 * only cares about a handful of leaves (Contents/Key, Size, ETag,
 * LastModified; CommonPrefixes/Prefix; IsTruncated; NextContinuationToken;
 * Error/Code). Text is accumulated per leaf, since expat may split it. An
 * error document alone (any status's body) has its own small parser, which
 * keeps Code, Message, Region and Endpoint for the messages.
 * Keys are turned into names relative to the listed prefix here, once; names
 * that could escape the mount or can't be shown (256 bytes or more; a key too
 * long to keep whole) are dropped and logged here, before any other layer sees
 * them. XML 1.0 can't carry a NUL (&#0; is malformed), so no name is cut by
 * one: such a page fails as malformed XML.
 */
#define _GNU_SOURCE
#include "net_int.h"
#include "fetch_int.h"

#include <errno.h>
#include <expat.h>
#include <ini.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define XML_DEPTH 8
#define XML_TEXT_MAX 2048 /* longest leaf we keep: S3 keys are at most 1024 bytes */

struct xml_ctx {
	struct remote_s3_page *page;
	const char *prefix;
	size_t prefix_len;
	int depth;
	char stack[XML_DEPTH][32]; /* element names, truncated; depth may exceed XML_DEPTH */
	char text[XML_TEXT_MAX];
	size_t text_len;
	bool text_cut; /* the leaf was longer than text: never used cut short */
	bool in_contents, in_prefixes;
	/* the <Contents> being read */
	char key[XML_TEXT_MAX];
	bool key_cut;
	struct cache_attr attr;
	int rc;
};

static const char *xml_parent(const struct xml_ctx *c)
{
	return c->depth >= 2 && c->depth - 2 < XML_DEPTH ? c->stack[c->depth - 2] : "";
}

static void on_start(void *user, const XML_Char *name, const XML_Char **attrs)
{
	struct xml_ctx *c = user;

	(void)attrs;
	if (c->depth < XML_DEPTH)
		snprintf(c->stack[c->depth], sizeof(c->stack[0]), "%s", name);
	c->depth++;
	c->text_len = 0;
	c->text[0] = '\0';
	c->text_cut = false;
	if (strcmp(name, "Contents") == 0) {
		c->in_contents = true;
		c->key[0] = '\0';
		c->key_cut = false;
		memset(&c->attr, 0, sizeof(c->attr));
		c->attr.mode = S_IFREG | 0444;
	} else if (strcmp(name, "CommonPrefixes") == 0) {
		c->in_prefixes = true;
	}
}

static void on_text(void *user, const XML_Char *s, int len)
{
	struct xml_ctx *c = user;
	size_t n = (size_t)len;

	if (c->text_len + n >= sizeof(c->text)) {
		n = sizeof(c->text) - 1 - c->text_len;
		c->text_cut = true;
	}
	memcpy(c->text + c->text_len, s, n);
	c->text_len += n;
	c->text[c->text_len] = '\0';
}

/*
 * Adds one entry named by @key minus the prefix; refuses (and logs) names that
 * would escape the mount or can't be shown, and keys that were cut (@cut).
 */
static void add_entry(struct xml_ctx *c, const char *key, bool cut, bool dir,
		      const struct cache_attr *a)
{
	struct remote_s3_page *p = c->page;
	char name[XML_TEXT_MAX];
	const char *why;
	size_t n;

	if (strncmp(key, c->prefix, c->prefix_len) != 0)
		return; /* not ours: a server bug, ignore */
	memcpy(name, key + c->prefix_len, strlen(key + c->prefix_len) + 1);
	n = strlen(name);
	if (dir && n > 0 && name[n - 1] == '/')
		name[--n] = '\0';
	if (!dir && n == 0 && !cut)
		return; /* the directory marker object itself */
	why = cut ? "the key is longer than 2047 bytes" : remote_name_refusal(name);
	if (why) {
		MCFS_WARN("s3: key '%s%s' under '%s' (%zu bytes) is refused: %s", key,
			  cut ? "..." : "", c->prefix, strlen(key), why);
		p->refused++;
		return;
	}
	if (p->n == p->cap) {
		size_t cap = p->cap ? 2 * p->cap : 64;
		struct cache_dirent *e = realloc(p->ents, cap * sizeof(*e));

		if (!e) {
			c->rc = -ENOMEM;
			return;
		}
		p->ents = e;
		p->cap = cap;
	}
	memset(&p->ents[p->n], 0, sizeof(p->ents[0]));
	memcpy(p->ents[p->n].name, name, n + 1);
	if (dir)
		p->ents[p->n].attr.mode = S_IFDIR | 0555;
	else
		p->ents[p->n].attr = *a;
	p->n++;
}

static void on_end(void *user, const XML_Char *name)
{
	struct xml_ctx *c = user;
	const char *parent = xml_parent(c);

	if (c->in_contents && strcmp(parent, "Contents") == 0) {
		if (strcmp(name, "Key") == 0) {
			memcpy(c->key, c->text, c->text_len + 1);
			c->key_cut = c->text_cut;
		} else if (strcmp(name, "Size") == 0)
			c->attr.size = strtoull(c->text, NULL, 10);
		else if (strcmp(name, "ETag") == 0)
			remote_copy(c->attr.version, sizeof(c->attr.version), c->text);
		else if (strcmp(name, "LastModified") == 0 &&
			 remote_parse_iso8601(c->text, &c->attr.mtime_ns) < 0)
			c->attr.mtime_ns = 0;
	} else if (c->in_prefixes && strcmp(name, "Prefix") == 0 &&
		   strcmp(parent, "CommonPrefixes") == 0) {
		add_entry(c, c->text, c->text_cut, true, NULL);
	} else if (strcmp(name, "Contents") == 0) {
		c->in_contents = false;
		add_entry(c, c->key, c->key_cut, false, &c->attr);
	} else if (strcmp(name, "CommonPrefixes") == 0) {
		c->in_prefixes = false;
	} else if (strcmp(name, "IsTruncated") == 0) {
		c->page->truncated = strcmp(c->text, "true") == 0;
	} else if (strcmp(name, "NextContinuationToken") == 0) {
		remote_copy(c->page->token, sizeof(c->page->token), c->text);
	} else if (strcmp(name, "Code") == 0 && strcmp(parent, "Error") == 0) {
		remote_copy(c->page->code, sizeof(c->page->code), c->text);
	}
	c->depth--;
	c->text_len = 0;
	c->text[0] = '\0';
}

/*
 * Runs expat over @xml with these handlers on @user. Returns 0, -EIO for
 * malformed XML (logged unless @quiet; the handlers saw what came before the
 * fault), -ENOMEM.
 */
static int xml_run(const char *xml, size_t len, void *user, XML_StartElementHandler start,
		   XML_EndElementHandler end, XML_CharacterDataHandler text, bool quiet)
{
	XML_Parser p;
	int rc = 0;

	if (len > INT_MAX)
		return -EIO;
	p = XML_ParserCreate("UTF-8");
	if (!p)
		return -ENOMEM;
	XML_SetUserData(p, user);
	XML_SetElementHandler(p, start, end);
	XML_SetCharacterDataHandler(p, text);
	if (XML_Parse(p, xml, (int)len, 1) != XML_STATUS_OK) {
		if (!quiet)
			MCFS_ERR("s3: malformed XML from the server at line %lu: %s",
				 (unsigned long)XML_GetCurrentLineNumber(p),
				 XML_ErrorString(XML_GetErrorCode(p)));
		rc = -EIO;
	}
	XML_ParserFree(p);
	return rc;
}

int remote_s3_parse_list(const char *xml, size_t len, const char *prefix,
			 struct remote_s3_page *page)
{
	struct xml_ctx *c;
	int rc;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->page = page;
	c->prefix = prefix;
	c->prefix_len = strlen(prefix);
	page->truncated = false;
	page->token[0] = page->code[0] = '\0';
	rc = xml_run(xml, len, c, on_start, on_end, on_text, false);
	if (rc == 0)
		rc = c->rc;
	free(c);
	return rc;
}

/* ---- error documents ---- */

struct err_ctx {
	struct remote_s3_error *out;
	int depth;
	bool is_error; /* the root element is <Error> */
	char text[XML_TEXT_MAX];
	size_t text_len;
};

static void err_start(void *user, const XML_Char *name, const XML_Char **attrs)
{
	struct err_ctx *c = user;

	(void)attrs;
	if (c->depth == 0)
		c->is_error = strcmp(name, "Error") == 0;
	c->depth++;
	c->text_len = 0;
	c->text[0] = '\0';
}

static void err_text(void *user, const XML_Char *s, int len)
{
	struct err_ctx *c = user;
	size_t n = MCFS_MIN((size_t)len, sizeof(c->text) - 1 - c->text_len);

	memcpy(c->text + c->text_len, s, n);
	c->text_len += n;
	c->text[c->text_len] = '\0';
}

static void err_end(void *user, const XML_Char *name)
{
	struct err_ctx *c = user;
	struct remote_s3_error *o = c->out;

	if (c->is_error && c->depth == 2) { /* a leaf of <Error> */
		if (strcmp(name, "Code") == 0)
			remote_copy(o->code, sizeof(o->code), c->text);
		else if (strcmp(name, "Message") == 0)
			remote_copy(o->message, sizeof(o->message), c->text);
		else if (strcmp(name, "Region") == 0)
			remote_copy(o->region, sizeof(o->region), c->text);
		else if (strcmp(name, "Endpoint") == 0)
			remote_copy(o->endpoint, sizeof(o->endpoint), c->text);
	}
	c->depth--;
	c->text_len = 0;
	c->text[0] = '\0';
}

int remote_s3_parse_error(const char *xml, size_t len, struct remote_s3_error *out)
{
	struct err_ctx *c;
	int rc;

	memset(out, 0, sizeof(*out));
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->out = out;
	/* a cut document keeps what came before the cut: its parse error is no matter */
	rc = xml_run(xml, len, c, err_start, err_end, err_text, true);
	if (rc != -ENOMEM)
		rc = c->is_error && out->code[0] ? 0 : -EINVAL;
	if (rc < 0)
		memset(out, 0, sizeof(*out));
	free(c);
	return rc;
}

/* ---- credentials ---- */

struct profile_ctx {
	const char *profile;
	struct remote_creds *out;
	bool found;
};

static int on_ini(void *user, const char *section, const char *name, const char *value)
{
	struct profile_ctx *c = user;
	struct remote_creds *o = c->out;

	if (strcmp(section, c->profile) != 0)
		return 1;
	if (strcmp(name, "aws_access_key_id") == 0)
		snprintf(o->access_key, sizeof(o->access_key), "%s", value);
	else if (strcmp(name, "aws_secret_access_key") == 0)
		snprintf(o->secret_key, sizeof(o->secret_key), "%s", value);
	else if (strcmp(name, "aws_session_token") == 0)
		snprintf(o->session_token, sizeof(o->session_token), "%s", value);
	else
		return 1;
	c->found = true;
	return 1;
}

int remote_aws_profile_load(const char *file, const char *profile, struct remote_creds *out)
{
	struct profile_ctx c = {.profile = profile, .out = out};
	int rc, n;

	memset(out, 0, sizeof(*out));
	rc = ini_parse(file, on_ini, &c);
	if (rc == -1)
		return -ENOENT;
	if (rc != 0)
		return -EINVAL;
	if (!c.found || !out->access_key[0] || !out->secret_key[0]) {
		memset(out, 0, sizeof(*out));
		return -ENOENT;
	}
	n = snprintf(out->source, sizeof(out->source), "profile '%s' in %s", profile, file);
	if (n < 0 || (size_t)n >= sizeof(out->source))
		/* a path longer than any we expect: show that the log line is cut */
		memcpy(out->source + sizeof(out->source) - 4, "...", 4);
	return 0;
}

static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

int remote_creds_resolve(const struct remote_s3_conf *conf, struct remote_creds *out)
{
	const char *ak = env("AWS_ACCESS_KEY_ID"), *sk = env("AWS_SECRET_ACCESS_KEY");
	const char *profile, *file, *home;
	char path[CFG_STR_MAX + 32];
	int rc;

	memset(out, 0, sizeof(*out));
	if (conf->access_key[0] && conf->secret_key[0]) {
		snprintf(out->access_key, sizeof(out->access_key), "%s", conf->access_key);
		snprintf(out->secret_key, sizeof(out->secret_key), "%s", conf->secret_key);
		snprintf(out->session_token, sizeof(out->session_token), "%s", conf->session_token);
		snprintf(out->source, sizeof(out->source), "the mount options");
		return 0;
	}
	/* an explicit profile wins over the environment's keys, as in the AWS CLI */
	if (ak && sk && !conf->profile[0]) {
		snprintf(out->access_key, sizeof(out->access_key), "%s", ak);
		snprintf(out->secret_key, sizeof(out->secret_key), "%s", sk);
		if (env("AWS_SESSION_TOKEN"))
			snprintf(out->session_token, sizeof(out->session_token), "%s",
				 env("AWS_SESSION_TOKEN"));
		snprintf(out->source, sizeof(out->source), "the environment");
		return 0;
	}
	profile = conf->profile[0] ? conf->profile : env("AWS_PROFILE");
	if (!profile)
		profile = "default";
	file = env("AWS_SHARED_CREDENTIALS_FILE");
	if (!file) {
		home = env("HOME");
		if (!home)
			return -ENOENT;
		snprintf(path, sizeof(path), "%s/.aws/credentials", home);
		file = path;
	}
	rc = remote_aws_profile_load(file, profile, out);
	return rc == -EINVAL ? -ENOENT : rc;
}
