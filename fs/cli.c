/*
 * cli.c - the mcfs command's table of commands and what is printed from it:
 * `mcfs help`, `mcfs CMD --help`, the usage line of a command line that is
 * wrong, and the "did you mean" of a mistyped command. main.c dispatches the
 * commands; prefetch.c and status.c print their usage from here, so every
 * command's synopsis is written once.
 */
#define _GNU_SOURCE
#include "cli.h"
#include "mcfs.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* The commands: `mcfs help`, `mcfs CMD --help` and the "did you mean" guess read this. */
struct command {
	const char *name;
	const char *args; /* the synopsis after the name */
	const char *what; /* one line for `mcfs help` */
	const char *more; /* what `mcfs CMD --help` adds, or NULL */
};

static const struct command commands[] = {
    {"mount", "SOURCE MOUNTPOINT [-o key=value,...] [-c FILE] [-f] [-d]",
     "mount a store, read-only",
     "SOURCE: /dir, file:///dir, http(s)://host/base, s3://bucket[/prefix]\n"
     "  -o  options, comma-separated (`mcfs help-config` lists them)\n"
     "  -c  config file (INI: key = value, at top level or in [mcfs]); -o wins\n"
     "  -f  stay in the foreground, log to stderr\n"
     "  -d  FUSE debug trace (implies -f)\n"
     "mount(8) and fstab run `mcfs SOURCE MOUNTPOINT -o ...`: the same, without \"mount\".\n"},
    {"umount", "[-l] MOUNTPOINT", "unmount, and wait for the daemon to finish",
     "  -l  lazy: detach now, finish when the open files close\n"},
    {"prefetch", "[-q] PATH...", "warm files or trees into the cache", "  -q  no progress bar\n"},
    {"status", "MOUNTPOINT", "cache tiers, hit ratios, fetches", NULL},
    {"evict", "PATH...", "drop files (or trees) from the cache", NULL},
    {"refresh", "PATH...", "ask the store again about trees (new files appear)",
     "Listings and attributes under each PATH are re-confirmed with the store at\n"
     "their next use, as SIGHUP to the daemon does for the whole mount.\n"},
    {"manifest", "DIR > DIR/.mcfs-manifest.json", "the listing an http store serves", NULL},
    {"log-level", "MOUNTPOINT [LEVEL]", "show or set the daemon's log level while mounted",
     "LEVEL: error, warning, info or debug; without it, the level in force.\n"
     "Lasts until the daemon exits; log_level sets it at mount.\n"},
    {"help-config", "", "every option, its default and what it allows", NULL},
    {"version", "", "the version", NULL},
    {"help", "[COMMAND]", "this text, or one command's", NULL},
};

static const struct command *find_command(const char *name)
{
	size_t i;

	if (strcmp(name, "unmount") == 0)
		name = "umount";
	for (i = 0; i < MCFS_ARRAY_SIZE(commands); i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

void fs_cli_print_usage(FILE *fp)
{
	char syn[256];
	size_t i;

	fprintf(fp,
		"mcfs %s - a model cache filesystem\n\n"
		"usage: mcfs COMMAND ...   (`mcfs COMMAND --help` for one command)\n",
		MCFS_VERSION);
	for (i = 0; i < MCFS_ARRAY_SIZE(commands); i++) {
		snprintf(syn, sizeof(syn), "mcfs %s %s", commands[i].name, commands[i].args);
		if (strlen(syn) > 34)
			fprintf(fp, "  %s\n  %-34s  %s\n", syn, "", commands[i].what);
		else
			fprintf(fp, "  %-34s  %s\n", syn, commands[i].what);
	}
}

static int command_help(const struct command *c)
{
	printf("usage: mcfs %s %s\n%s\n%s", c->name, c->args, c->what, c->more ? c->more : "");
	return 0;
}

int fs_cli_help(const char *cmd)
{
	const struct command *c = find_command(cmd);

	return c ? command_help(c) : 0;
}

int fs_cli_usage(const char *cmd)
{
	const struct command *c = find_command(cmd);

	if (c)
		fprintf(stderr, "usage: mcfs %s %s   (`mcfs %s --help` for more)\n", c->name,
			c->args, c->name);
	return FS_EXIT_USAGE;
}

int fs_cli_bad_option(const char *cmd, int c, char **argv)
{
	const char *word = argv[optind - 1];

	if (c == ':')
		MCFS_ERR("%s: option '%s' needs a value", cmd, word);
	else if (optopt)
		MCFS_ERR("%s: unknown option '-%c'", cmd, optopt);
	else
		MCFS_ERR("%s: unknown option '%s'", cmd, word);
	return fs_cli_usage(cmd);
}

bool fs_cli_wants_help(int argc, char **argv)
{
	int i;

	for (i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
			return true;
	return false;
}

int fs_cli_unknown(const char *word, int argc)
{
	const char *names[MCFS_ARRAY_SIZE(commands) + 1], *near;
	size_t i;

	if (word[0] == '-') {
		MCFS_ERR("unknown option '%s' (`mcfs help` lists the commands)", word);
		return FS_EXIT_USAGE;
	}
	for (i = 0; i < MCFS_ARRAY_SIZE(commands); i++)
		names[i] = commands[i].name;
	names[i] = "unmount";
	near = mcfs_nearest(word, names, MCFS_ARRAY_SIZE(names));
	if (near)
		MCFS_ERR("unknown command '%s': did you mean '%s'? (`mcfs help` lists the "
			 "commands)",
			 word, near);
	else if (argc >= 3)
		MCFS_ERR("unknown command '%s', and no file or directory of that name to mount "
			 "(`mcfs help` lists the commands)",
			 word);
	else
		MCFS_ERR("unknown command '%s' (`mcfs help` lists the commands)", word);
	return FS_EXIT_USAGE;
}

bool fs_cli_known(const char *cmd)
{
	return find_command(cmd) != NULL;
}
