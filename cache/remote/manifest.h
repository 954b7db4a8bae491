/*
 * manifest.h - the JSON manifest that lists an http store.
 *
 * A static HTTP server (nginx, a CDN, a mirror) can serve byte ranges but
 * cannot list a directory in a form a program can trust. `mcfs manifest DIR >
 * DIR/.mcfs-manifest.json` writes the listing once, next to the files, and the
 * http backend reads it from <base>/<cfg->manifest>. Format (cJSON):
 *
 *   {"format": "mcfs-manifest", "version": 1, "entries": [
 *     {"path": "sub", "type": "dir", "mtime": 1700000000, "mtime_nsec": 0},
 *     {"path": "sub/a.bin", "type": "file", "size": 123, "mtime": 1700000000,
 *      "mtime_nsec": 5},
 *     {"path": "link", "type": "symlink", "target": "sub/a.bin"}]}
 *
 * Paths are relative, '/'-separated. A file's entry has no version: the
 * validator that reads carry (If-Match) must be the server's own, which a CDN
 * or mirror computes its own way, so the http backend HEADs a file when it is
 * opened (fs/ stats any file a listing gave no version). An "etag" key, as
 * older manifests have, is ignored. The manifest file itself is not listed.
 */
#ifndef MCFS_MANIFEST_H
#define MCFS_MANIFEST_H

#include <stdio.h>

#include "mcfs.h"

#define REMOTE_MANIFEST_NAME ".mcfs-manifest.json"

/*
 * Writes the manifest of the tree under @dir to @out. Does not follow
 * symlinks (they are listed as symlinks); skips sockets, devices and FIFOs and
 * any file named REMOTE_MANIFEST_NAME. Returns 0, or a negative errno after
 * printing what failed to stderr (this runs in the CLI, not the daemon).
 */
MCFS_MUST_CHECK int remote_manifest_write(const char *dir, FILE *out);

#endif
