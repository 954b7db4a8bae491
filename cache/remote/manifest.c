/*
 * manifest.c - the http store's listings: the mcfs JSON manifest (writer and
 * parser) and nginx's `autoindex_format json` pages (parser).
 *
 * Design: a parsed manifest is one array of entries sorted by (parent
 * directory, name), so that a lookup is a binary search and a directory's
 * entries are one contiguous run. Parent directories that the manifest does
 * not list are added, so a manifest of only files still browses. The array is
 * immutable once built: readers need no lock (http.c swaps whole manifests).
 *
 * Refuses: entries whose path is absolute or has empty, "." or ".." parts
 * (logged, dropped); duplicate paths keep the first.
 */
#define _GNU_SOURCE
#include "manifest.h"
#include "net_int.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct ment {
	char *path;	   /* owned; "" never appears (the root is implicit) */
	size_t parent_len; /* bytes of path before the last '/' (0 at top level) */
	const char *name;  /* points into path */
	char *target;	   /* symlink target, owned; NULL otherwise */
	bool implied;	   /* added as the parent of another entry, not listed itself */
	struct cache_attr attr;
};

struct remote_manifest {
	struct ment *e; /* sorted by (parent, name) */
	size_t n, cap;
};

/* ---- writer ---- */

static int add_json(cJSON *arr, const char *rel, const struct stat *st, const char *target)
{
	cJSON *o = cJSON_CreateObject();

	if (!o)
		return -ENOMEM;
	cJSON_AddItemToArray(arr, o);
	cJSON_AddStringToObject(o, "path", rel);
	if (S_ISDIR(st->st_mode)) {
		cJSON_AddStringToObject(o, "type", "dir");
	} else if (S_ISLNK(st->st_mode)) {
		cJSON_AddStringToObject(o, "type", "symlink");
		cJSON_AddStringToObject(o, "target", target);
	} else {
		cJSON_AddStringToObject(o, "type", "file");
		cJSON_AddNumberToObject(o, "size", (double)st->st_size);
	}
	cJSON_AddNumberToObject(o, "mtime", (double)st->st_mtim.tv_sec);
	cJSON_AddNumberToObject(o, "mtime_nsec", (double)st->st_mtim.tv_nsec);
	return 0;
}

static int walk(int dfd, const char *rel, cJSON *arr, unsigned depth)
{
	struct dirent **names = NULL;
	char path[4096], target[4096];
	int i, n, fd, rc = 0;
	struct stat st;
	DIR *d;

	if (depth > 256)
		return -ELOOP;
	fd = dup(dfd);
	d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	n = scandirat(dfd, ".", &names, NULL, alphasort);
	closedir(d);
	if (n < 0)
		return -errno;
	for (i = 0; i < n; i++) {
		const char *nm = names[i]->d_name;

		if (rc < 0 || strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0 ||
		    strcmp(nm, REMOTE_MANIFEST_NAME) == 0)
			continue;
		snprintf(path, sizeof(path), "%s%s%s", rel, rel[0] ? "/" : "", nm);
		if (fstatat(dfd, nm, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			rc = -errno;
			fprintf(stderr, "mcfs manifest: %s: %s\n", path, strerror(errno));
			continue;
		}
		if (S_ISLNK(st.st_mode)) {
			ssize_t l = readlinkat(dfd, nm, target, sizeof(target) - 1);

			if (l < 0)
				continue;
			target[l] = '\0';
			rc = add_json(arr, path, &st, target);
		} else if (S_ISREG(st.st_mode)) {
			rc = add_json(arr, path, &st, NULL);
		} else if (S_ISDIR(st.st_mode)) {
			int sub = openat(dfd, nm, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);

			if (sub < 0) {
				rc = -errno;
				fprintf(stderr, "mcfs manifest: %s: %s\n", path, strerror(errno));
				continue;
			}
			rc = add_json(arr, path, &st, NULL);
			if (rc == 0)
				rc = walk(sub, path, arr, depth + 1);
			close(sub);
		}
	}
	for (i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return rc;
}

int remote_manifest_write(const char *dir, FILE *out)
{
	cJSON *root, *arr;
	char *text;
	int dfd, rc;

	dfd = open(dir, O_RDONLY | O_DIRECTORY);
	if (dfd < 0) {
		rc = -errno;
		fprintf(stderr, "mcfs manifest: %s: %s\n", dir, strerror(errno));
		return rc;
	}
	root = cJSON_CreateObject();
	arr = cJSON_CreateArray();
	if (!root || !arr) {
		cJSON_Delete(root);
		cJSON_Delete(arr);
		close(dfd);
		return -ENOMEM;
	}
	cJSON_AddStringToObject(root, "format", "mcfs-manifest");
	cJSON_AddNumberToObject(root, "version", 1);
	cJSON_AddItemToObject(root, "entries", arr);
	rc = walk(dfd, "", arr, 0);
	close(dfd);
	text = rc == 0 ? cJSON_Print(root) : NULL;
	cJSON_Delete(root);
	if (rc < 0)
		return rc;
	if (!text)
		return -ENOMEM;
	if (fputs(text, out) < 0 || fputc('\n', out) < 0 || fflush(out) != 0)
		rc = -EIO;
	free(text);
	return rc;
}

/* ---- parser ---- */

static int key_cmp(const char *pa, size_t la, const char *na, const char *pb, size_t lb,
		   const char *nb)
{
	int c = strncmp(pa, pb, MCFS_MIN(la, lb));

	if (c == 0 && la != lb)
		c = la < lb ? -1 : 1;
	return c != 0 ? c : strcmp(na, nb);
}

static int ment_cmp(const void *a, const void *b)
{
	const struct ment *x = a, *y = b;

	return key_cmp(x->path, x->parent_len, x->name, y->path, y->parent_len, y->name);
}

static int add_ment(struct remote_manifest *m, const char *path, const struct cache_attr *a,
		    const char *target)
{
	struct ment *e;
	const char *slash;

	if (m->n == m->cap) {
		size_t cap = m->cap ? 2 * m->cap : 64;

		e = realloc(m->e, cap * sizeof(*e));
		if (!e)
			return -ENOMEM;
		m->e = e;
		m->cap = cap;
	}
	e = &m->e[m->n];
	memset(e, 0, sizeof(*e));
	e->path = strdup(path);
	e->target = target ? strdup(target) : NULL;
	if (!e->path || (target && !e->target)) {
		free(e->path);
		free(e->target);
		return -ENOMEM;
	}
	slash = strrchr(e->path, '/');
	e->parent_len = slash ? (size_t)(slash - e->path) : 0;
	e->name = slash ? slash + 1 : e->path;
	e->attr = *a;
	m->n++;
	return 0;
}

static double num(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static const char *str(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int parse_entry(struct remote_manifest *m, const cJSON *o)
{
	const char *path = str(o, "path"), *type = str(o, "type");
	const char *target = str(o, "target");
	struct cache_attr a;

	if (!path || !type)
		return 0;
	if (path[0] == '\0' || remote_check_path(path) < 0) {
		MCFS_WARN("http: manifest entry '%s' is refused: it would escape the mount", path);
		return 0;
	}
	memset(&a, 0, sizeof(a));
	a.mtime_ns = (int64_t)num(o, "mtime") * 1000000000 + (int64_t)num(o, "mtime_nsec");
	if (strcmp(type, "dir") == 0) {
		a.mode = S_IFDIR | 0555;
	} else if (strcmp(type, "symlink") == 0 && target) {
		a.mode = S_IFLNK | 0777;
		a.size = strlen(target);
	} else if (strcmp(type, "file") == 0) {
		a.mode = S_IFREG | 0444;
		a.size = (uint64_t)num(o, "size");
		/* no version: the server's own validator comes from a HEAD at open
		 * (an "etag" key, as older mcfs wrote, guessed nginx's and is ignored) */
	} else {
		return 0;
	}
	return add_ment(m, path, &a, a.mode == (S_IFLNK | 0777) ? target : NULL);
}

static const struct ment *find(const struct remote_manifest *m, const char *path)
{
	const char *slash = strrchr(path, '/');
	size_t plen = slash ? (size_t)(slash - path) : 0;
	const char *name = slash ? slash + 1 : path;
	size_t lo = 0, hi = m->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct ment *e = &m->e[mid];
		int c = key_cmp(e->path, e->parent_len, e->name, path, plen, name);

		if (c == 0)
			return e;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* Adds every missing parent directory, then sorts and drops duplicates. */
static int finish(struct remote_manifest *m)
{
	struct cache_attr dir = {.mode = S_IFDIR | 0555};
	size_t i, n0 = m->n, k;
	char buf[4096];
	int rc;

	for (i = 0; i < n0; i++) {
		snprintf(buf, sizeof(buf), "%s", m->e[i].path);
		for (char *s = strrchr(buf, '/'); s; s = strrchr(buf, '/')) {
			*s = '\0';
			rc = add_ment(m, buf, &dir, NULL);
			if (rc < 0)
				return rc;
			m->e[m->n - 1].implied = true;
		}
	}
	qsort(m->e, m->n, sizeof(m->e[0]), ment_cmp);
	for (i = 0, k = 0; i < m->n; i++) {
		if (k > 0 && ment_cmp(&m->e[k - 1], &m->e[i]) == 0) {
			/* keep the listed entry over an implied parent */
			if (m->e[k - 1].implied && !m->e[i].implied) {
				struct ment t = m->e[k - 1];

				m->e[k - 1] = m->e[i];
				m->e[i] = t;
			}
			free(m->e[i].path);
			free(m->e[i].target);
			continue;
		}
		m->e[k++] = m->e[i];
	}
	m->n = k;
	return 0;
}

int remote_manifest_parse(const char *json, size_t len, struct remote_manifest **out)
{
	struct remote_manifest *m;
	const cJSON *entries, *o;
	cJSON *root;
	int rc = 0;

	root = cJSON_ParseWithLength(json, len);
	if (!root)
		return -EINVAL;
	entries = cJSON_GetObjectItemCaseSensitive(root, "entries");
	if (!cJSON_IsArray(entries) || !str(root, "format") ||
	    strcmp(str(root, "format"), "mcfs-manifest") != 0) {
		cJSON_Delete(root);
		return -EINVAL;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		cJSON_Delete(root);
		return -ENOMEM;
	}
	cJSON_ArrayForEach(o, entries)
	{
		rc = parse_entry(m, o);
		if (rc < 0)
			break;
	}
	cJSON_Delete(root);
	if (rc == 0)
		rc = finish(m);
	if (rc < 0) {
		remote_manifest_free(m);
		return rc;
	}
	*out = m;
	return 0;
}

void remote_manifest_free(struct remote_manifest *m)
{
	size_t i;

	if (!m)
		return;
	for (i = 0; i < m->n; i++) {
		free(m->e[i].path);
		free(m->e[i].target);
	}
	free(m->e);
	free(m);
}

size_t remote_manifest_count(const struct remote_manifest *m)
{
	return m->n;
}

int remote_manifest_stat(const struct remote_manifest *m, const char *path, struct cache_attr *attr,
			 const char **target)
{
	const struct ment *e;

	if (path[0] == '\0') {
		memset(attr, 0, sizeof(*attr));
		attr->mode = S_IFDIR | 0555;
		if (target)
			*target = NULL;
		return 0;
	}
	e = find(m, path);
	if (!e)
		return -ENOENT;
	*attr = e->attr;
	if (target)
		*target = e->target;
	return 0;
}

int remote_manifest_list(const struct remote_manifest *m, const char *path,
			 struct cache_dirent **out, size_t *n)
{
	size_t plen = strlen(path), lo = 0, hi = m->n, i, k = 0;
	struct cache_dirent *ents;
	struct cache_attr a;
	int rc;

	rc = remote_manifest_stat(m, path, &a, NULL);
	if (rc < 0)
		return rc;
	if ((a.mode & S_IFMT) != S_IFDIR)
		return -ENOTDIR;
	/* first entry whose parent is >= path */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct ment *e = &m->e[mid];

		if (key_cmp(e->path, e->parent_len, e->name, path, plen, "") < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (i = lo;
	     i < m->n && m->e[i].parent_len == plen && strncmp(m->e[i].path, path, plen) == 0 &&
	     (plen == 0 || m->e[i].path[plen] == '/');
	     i++)
		;
	ents = calloc(i - lo + 1, sizeof(*ents));
	if (!ents)
		return -ENOMEM;
	for (; lo < i; lo++, k++) {
		snprintf(ents[k].name, sizeof(ents[k].name), "%s", m->e[lo].name);
		ents[k].attr = m->e[lo].attr;
	}
	*out = ents;
	*n = k;
	return 0;
}

int remote_autoindex_parse(const char *json, size_t len, struct cache_dirent **out, size_t *n)
{
	struct cache_dirent *ents;
	const cJSON *o;
	cJSON *root;
	size_t k = 0;

	root = cJSON_ParseWithLength(json, len);
	if (!cJSON_IsArray(root)) {
		cJSON_Delete(root);
		return -EINVAL;
	}
	ents = calloc((size_t)cJSON_GetArraySize(root) + 1, sizeof(*ents));
	if (!ents) {
		cJSON_Delete(root);
		return -ENOMEM;
	}
	cJSON_ArrayForEach(o, root)
	{
		const char *name = str(o, "name"), *type = str(o, "type"), *mt = str(o, "mtime");
		time_t t;

		if (!name || !type || strlen(name) >= CACHE_NAME_MAX)
			continue;
		memset(&ents[k], 0, sizeof(ents[k]));
		snprintf(ents[k].name, sizeof(ents[k].name), "%s", name);
		if (strcmp(type, "directory") == 0)
			ents[k].attr.mode = S_IFDIR | 0555;
		else if (strcmp(type, "file") == 0)
			ents[k].attr.mode = S_IFREG | 0444;
		else
			continue;
		ents[k].attr.size = (uint64_t)num(o, "size");
		t = mt ? curl_getdate(mt, NULL) : 0;
		ents[k].attr.mtime_ns = t > 0 ? (int64_t)t * 1000000000 : 0;
		/* The ETag nginx sends for this file ("%xT-%xO": mtime seconds, size),
		 * so that a listed file has the identity a HEAD gives it: an `ls`
		 * must not make its cached blocks unreachable. */
		if (S_ISREG(ents[k].attr.mode) && t > 0)
			snprintf(ents[k].attr.version, sizeof(ents[k].attr.version),
				 "\"%llx-%llx\"", (unsigned long long)t,
				 (unsigned long long)ents[k].attr.size);
		k++;
	}
	cJSON_Delete(root);
	*out = ents;
	*n = k;
	return 0;
}
