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
 * Refuses (each logged, then dropped): entries whose path is absolute, has
 * empty, "." or ".." parts or a part longer than 255 bytes, or holds a NUL
 * byte (cJSON would hand it back cut short: see nul_marked()); a path listed
 * twice is kept once, a file over a directory of the same name.
 *
 * Neither listing carries a version: the validator that reads send
 * (If-Match) must be the one the server gives (a HEAD at open), never one
 * guessed from its listing, which a server without ETags would refuse.
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

/*
 * cJSON keeps strings as C strings, so a name holding a NUL byte (raw, or the
 * escape \u0000) would come back cut short, as another name. When the text
 * has one, *out is a copy in which each such NUL is 0x01 instead: a second
 * parse of it has the same shape, and a string that differs between the two
 * parses is one that a NUL cut. *out is NULL when the text has none (almost
 * always). Returns 0 or -ENOMEM; caller frees *out with free().
 */
static int nul_marked(const char *json, size_t len, char **out)
{
	size_t i, backslashes = 0;
	char *copy = NULL;

	for (i = 0; i < len; i++) {
		bool raw = json[i] == '\0';
		/* \u0000 after an odd run of backslashes (an even run escapes them) */
		bool escaped = json[i] == 'u' && backslashes % 2 == 1 && i + 4 < len &&
			       memcmp(json + i + 1, "0000", 4) == 0;

		backslashes = json[i] == '\\' ? backslashes + 1 : 0;
		if (!raw && !escaped)
			continue;
		if (!copy) {
			copy = malloc(len + 1);
			if (!copy)
				return -ENOMEM;
			memcpy(copy, json, len);
			copy[len] = '\0';
		}
		if (raw)
			copy[i] = '\x01';
		else
			copy[i + 4] = '1';
	}
	*out = copy;
	return 0;
}

/* Parses @json and, if it holds a NUL, its marked twin (*twin; else NULL). */
static int parse_twins(const char *json, size_t len, cJSON **root, cJSON **twin)
{
	char *marked = NULL;
	int rc;

	*twin = NULL;
	*root = cJSON_ParseWithLength(json, len);
	if (!*root)
		return -EINVAL;
	rc = nul_marked(json, len, &marked);
	if (rc == 0 && marked) {
		*twin = cJSON_ParseWithLength(marked, len);
		if (!*twin)
			rc = -ENOMEM; /* same shape as *root, so only memory can fail it */
	}
	free(marked);
	if (rc < 0) {
		cJSON_Delete(*root);
		*root = NULL;
	}
	return rc;
}

/* The item after @o in the twin parse (NULL when there is no twin). */
static const cJSON *twin_next(const cJSON *t)
{
	return t ? t->next : NULL;
}

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

static const char *kind(const struct ment *e)
{
	return S_ISDIR(e->attr.mode) ? "directory" : S_ISLNK(e->attr.mode) ? "symlink" : "file";
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

/* True if a NUL cut @o's string @key short (@twin: its marked twin, or NULL). */
static bool cut_by_nul(const cJSON *o, const cJSON *twin, const char *key)
{
	const char *a = str(o, key), *b = twin ? str(twin, key) : NULL;

	return a && b && strcmp(a, b) != 0;
}

static int parse_entry(struct remote_manifest *m, const cJSON *o, const cJSON *twin)
{
	const char *path = str(o, "path"), *type = str(o, "type");
	const char *target = str(o, "target"), *why;
	struct cache_attr a;

	if (!path || !type) {
		MCFS_WARN("http: manifest entry without a \"path\" or \"type\" string: skipped");
		return 0;
	}
	if (cut_by_nul(o, twin, "path") || cut_by_nul(o, twin, "target")) {
		MCFS_WARN("http: manifest entry '%s%s' is refused: its %s holds a NUL byte", path,
			  cut_by_nul(o, twin, "path") ? "\\0..." : "",
			  cut_by_nul(o, twin, "path") ? "path" : "target");
		return 0;
	}
	why = path[0] ? remote_path_refusal(path) : "it is empty";
	if (why) {
		MCFS_WARN("http: manifest entry '%s' is refused: %s", path, why);
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
		MCFS_WARN("http: manifest entry '%s' is refused: type '%s'%s is not file, dir or "
			  "symlink (with a target)",
			  path, type, target ? "" : " without a target");
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

/*
 * Of two entries with one path, which to keep: a listed one over a parent
 * implied by other paths, then a file or symlink over a directory (as the
 * http store's stat, a HEAD of that name, answers), else either (the same
 * kind under the same path).
 */
static bool keep_second(const struct ment *a, const struct ment *b)
{
	if (a->implied != b->implied)
		return a->implied;
	if (S_ISDIR(a->attr.mode) != S_ISDIR(b->attr.mode))
		return S_ISDIR(a->attr.mode);
	return false;
}

static void log_dup(const struct ment *kept, const struct ment *dup)
{
	if (dup->implied && S_ISDIR(kept->attr.mode))
		return; /* a directory, listed and implied by its contents: nothing wrong */
	if (dup->implied)
		MCFS_WARN("http: manifest lists '%s' as a %s and has paths under it: shown as "
			  "the %s, the paths under it are hidden",
			  kept->path, S_ISLNK(kept->attr.mode) ? "symlink" : "file",
			  S_ISLNK(kept->attr.mode) ? "symlink" : "file");
	else
		MCFS_WARN("http: manifest lists '%s' twice (%s and %s): the %s is shown",
			  kept->path, kind(dup), kind(kept), kind(kept));
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
			struct ment *kept = &m->e[k - 1], *dup = &m->e[i];

			if (keep_second(kept, dup)) {
				struct ment t = *kept;

				*kept = *dup;
				*dup = t;
			}
			log_dup(kept, dup);
			free(dup->path);
			free(dup->target);
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
	const cJSON *entries, *o, *t = NULL;
	cJSON *root, *twin;
	int rc;

	rc = parse_twins(json, len, &root, &twin);
	if (rc < 0)
		return rc;
	entries = cJSON_GetObjectItemCaseSensitive(root, "entries");
	if (!cJSON_IsArray(entries) || !str(root, "format") ||
	    strcmp(str(root, "format"), "mcfs-manifest") != 0) {
		cJSON_Delete(root);
		cJSON_Delete(twin);
		return -EINVAL;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		cJSON_Delete(root);
		cJSON_Delete(twin);
		return -ENOMEM;
	}
	if (twin)
		t = cJSON_GetObjectItemCaseSensitive(twin, "entries")->child;
	cJSON_ArrayForEach(o, entries)
	{
		rc = parse_entry(m, o, t);
		if (rc < 0)
			break;
		t = twin_next(t);
	}
	cJSON_Delete(root);
	cJSON_Delete(twin);
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

/* One autoindex entry into @e; 0 if it is shown, -EINVAL if refused (logged). */
static int autoindex_entry(const cJSON *o, const cJSON *twin, const char *what,
			   struct cache_dirent *e)
{
	const char *name = str(o, "name"), *type = str(o, "type"), *mt = str(o, "mtime");
	const char *why;
	bool nul;
	time_t t;

	if (!name || !type) {
		MCFS_WARN("http: listing %s has an entry without a \"name\" or \"type\" string: "
			  "skipped",
			  what);
		return -EINVAL;
	}
	nul = cut_by_nul(o, twin, "name");
	why = nul ? "it holds a NUL byte" : remote_name_refusal(name);
	if (why) {
		MCFS_WARN("http: listing %s has an entry named '%s%s' (%zu bytes%s): refused (%s)",
			  what, name, nul ? "\\0..." : "", strlen(name),
			  nul ? " before the NUL" : "", why);
		return -EINVAL;
	}
	memset(e, 0, sizeof(*e));
	memcpy(e->name, name, strlen(name) + 1);
	if (strcmp(type, "directory") == 0) {
		e->attr.mode = S_IFDIR | 0555;
	} else if (strcmp(type, "file") == 0) {
		e->attr.mode = S_IFREG | 0444;
	} else {
		MCFS_INFO("http: listing %s: '%s' is not a file or directory (type '%s'): not "
			  "shown",
			  what, name, type);
		return -EINVAL;
	}
	e->attr.size = (uint64_t)num(o, "size");
	t = mt ? curl_getdate(mt, NULL) : 0;
	e->attr.mtime_ns = t > 0 ? (int64_t)t * 1000000000 : 0;
	/* No version: a server without ETags (nginx `etag off;`) or with its own
	 * formula would refuse one guessed here (412). The open asks the server
	 * (HEAD), and that validator is the one reads carry. */
	return 0;
}

int remote_autoindex_parse(const char *json, size_t len, const char *what,
			   struct cache_dirent **out, size_t *n)
{
	struct cache_dirent *ents;
	const cJSON *o, *t;
	cJSON *root, *twin;
	size_t k = 0;
	int rc;

	rc = parse_twins(json, len, &root, &twin);
	if (rc < 0)
		return rc;
	if (!cJSON_IsArray(root)) {
		cJSON_Delete(root);
		cJSON_Delete(twin);
		return -EINVAL;
	}
	ents = calloc((size_t)cJSON_GetArraySize(root) + 1, sizeof(*ents));
	if (!ents) {
		cJSON_Delete(root);
		cJSON_Delete(twin);
		return -ENOMEM;
	}
	t = twin ? twin->child : NULL;
	cJSON_ArrayForEach(o, root)
	{
		if (autoindex_entry(o, t, what, &ents[k]) == 0)
			k++;
		t = twin_next(t);
	}
	cJSON_Delete(root);
	cJSON_Delete(twin);
	*out = ents;
	*n = k;
	return 0;
}
