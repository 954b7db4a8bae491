/*
 * main.c - the mcfs command: mount, umount, help-config.
 *
 * `mcfs mount SOURCE MOUNTPOINT [-o k=v,...] [-c FILE] [-f] [-d]`, and the
 * same without the word "mount" (the form mount.fuse3 uses for
 * `mount -t fuse.mcfs` and fstab lines); and the dispatch of the other
 * commands, whose table and help texts are cli.c's. A first word that is no
 * command is taken as a SOURCE only if it looks like one (see
 * looks_like_source()), so a typo gets "unknown command", not an error about
 * a directory it never meant.
 *
 * Daemon mode: the parent forks at once and waits on a pipe; the child opens
 * the store, sets up the cache, mounts, and writes one byte when the mount
 * is ready. Every error before that goes to the terminal and becomes the
 * parent's exit status, so `mcfs mount` never returns 0 for a mount that
 * failed. Only then does the child detach its stdio and log to syslog.
 */
#define _GNU_SOURCE
#include "fs_int.h"
#include "cli.h"
#include "inode.h"
#include "mount_util.h"
#include "gpu.h"
#include "gpu_build.h" /* generated: MCFS_GPU_BUILD */
#include "metrics.h"
#include "signals.h"
#include "cache.h"
#include "cache_metadata.h"
#include "cache_stats.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#define EXIT_USAGE FS_EXIT_USAGE

/* Fills cfg from argv. Returns 0, or FS_EXIT_USAGE after printing why. */
static int parse_mount_args(int argc, char **argv, struct cfg *cfg)
{
	static const struct option longopts[] = {{"help", no_argument, NULL, 'h'},
						 {NULL, 0, NULL, 0}};
	const char *opts[64], *cfgfile = NULL;
	char err[CFG_ERR_MAX];
	int c, nopts = 0, i;

	optind = 1;
	opterr = 0; /* our messages, with our prefix */
	for (;;) {
		c = getopt_long(argc, argv, ":o:c:fdh", longopts, NULL);
		if (c == -1)
			break;
		switch (c) {
		case 'o':
			if (nopts == (int)MCFS_ARRAY_SIZE(opts)) {
				MCFS_ERR("mount: more than %d -o options: join them with commas",
					 nopts);
				return FS_EXIT_USAGE;
			}
			opts[nopts++] = optarg;
			break;
		case 'c':
			cfgfile = optarg;
			break;
		case 'f':
			cfg->foreground = true;
			break;
		case 'd':
			cfg->fuse_debug = true;
			cfg->foreground = true;
			break;
		case 'h':
			exit(fs_cli_help("mount"));
		default:
			return fs_cli_bad_option("mount", c, argv);
		}
	}
	if (argc - optind != 2) {
		if (argc - optind == 0)
			MCFS_ERR("mount needs SOURCE and MOUNTPOINT");
		else if (argc - optind == 1)
			MCFS_ERR("mount needs a MOUNTPOINT after SOURCE '%s'", argv[optind]);
		else
			MCFS_ERR("mount takes SOURCE and MOUNTPOINT: '%s' is one word too many",
				 argv[optind + 2]);
		return fs_cli_usage("mount");
	}
	cfg_set_source(cfg, argv[optind]);
	snprintf(cfg->mountpoint, sizeof(cfg->mountpoint), "%s", argv[optind + 1]);
	/* Defaults, then the file, then -o: in that order whatever the command line's. */
	if (cfgfile && cfg_load_file(cfg, cfgfile, err, sizeof(err)) < 0) {
		MCFS_ERR("%s", err);
		return FS_EXIT_USAGE;
	}
	for (i = 0; i < nopts; i++) {
		if (cfg_set_opts(cfg, opts[i], err, sizeof(err)) < 0) {
			MCFS_ERR("%s", err);
			return FS_EXIT_USAGE;
		}
	}
	if (cfg_validate(cfg, err, sizeof(err)) < 0) {
		MCFS_ERR("%s", err);
		return FS_EXIT_USAGE;
	}
	return 0;
}

/* Builds libfuse's arguments: read-only, named after the source. */
static int fuse_args_for(const struct cfg *cfg, struct fuse_args *args)
{
	char opt[CFG_STR_MAX + 128], name[CFG_STR_MAX];
	char *p;

	if (fuse_opt_add_arg(args, "mcfs") < 0)
		return -ENOMEM;
	/* fsname is itself a mount option: it may not hold ',' or '\\'. */
	snprintf(name, sizeof(name), "%s", cfg->source_shown);
	for (p = name; *p; p++)
		if (*p == ',' || *p == '\\')
			*p = '_';
	snprintf(opt, sizeof(opt), "ro,subtype=mcfs,default_permissions,fsname=%s%s", name,
		 cfg->allow_other ? ",allow_other" : "");
	if (fuse_opt_add_arg(args, "-o") < 0 || fuse_opt_add_arg(args, opt) < 0)
		return -ENOMEM;
	if (cfg->fuse_debug && fuse_opt_add_arg(args, "-d") < 0)
		return -ENOMEM;
	return 0;
}

static void teardown(struct fs_session *s)
{
	fs_open_drain(s); /* opens waiting for a whole fetch answer first */
	/* The state stays as the kernel sees it: a next daemon resumes from it. */
	fs_handover_free(s);
	fs_push_stop(s); /* they notify the session */
	gpu_free(s->gpu);
	if (s->se)
		fuse_session_destroy(s->se);
	s->se = NULL; /* the handles freed below must not notify a destroyed session */
	if (s->cache)
		fs_handles_free_all(s); /* files still open at unmount */
	cache_free(s->cache);		/* waits for fetches in flight; closes the store */
	fs_inodes_free(s->inodes);
}

/*
 * Builds the cache (which opens the store) and mounts. Returns 0 with the
 * session ready to serve, or a negative errno after logging why.
 */
static int setup(struct fs_session *s)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	int rc;

	rc = cache_new(&s->cfg, &s->cache);
	if (rc == 0)
		rc = fs_inodes_new(s, &s->inodes);
	if (rc < 0)
		return rc;
	rc = gpu_new(&s->cfg, s->cache, &s->gpu);
	if (rc < 0)
		return rc;
	rc = fuse_args_for(&s->cfg, &args);
	if (rc == 0)
		rc = fs_conn_args(s, &args);
	if (rc < 0) {
		fuse_opt_free_args(&args);
		return rc;
	}
	s->se = fuse_session_new(&args, &fs_ops, sizeof(fs_ops), s);
	if (s->se && s->ho.resume) {
		rc = fs_handover_resume(s, s->se);
		if (rc < 0) {
			/* Start over on a mount of our own: the held one cannot be served. */
			MCFS_ERR(
			    "cannot resume the mount on %s: unmounting it (lazily: its readers "
			    "get ENOTCONN) and mounting afresh",
			    s->cfg.mountpoint);
			fuse_session_destroy(s->se);
			fs_handles_free_all(s);
			fs_inodes_free(s->inodes);
			s->inodes = NULL;
			s->ho.resume = false;
			if (umount2(s->cfg.mountpoint, MNT_DETACH) < 0)
				MCFS_WARN("lazy unmount of %s: %s", s->cfg.mountpoint,
					  strerror(errno));
			rc = fs_inodes_new(s, &s->inodes);
			s->se = rc < 0 ? NULL : fuse_session_new(&args, &fs_ops, sizeof(fs_ops), s);
		}
	}
	fuse_opt_free_args(&args);
	if (!s->se) {
		MCFS_ERR("cannot create the FUSE session (see the message above)");
		return -EINVAL;
	}
	if (s->ho.resume) {
		s->started_ns = mcfs_now_ns();
		return fs_push_start(s);
	}
	if (fuse_session_mount(s->se, s->cfg.mountpoint) != 0) {
		MCFS_ERR("cannot mount on %s (is /dev/fuse there, and are we root or is "
			 "fusermount3 installed?)",
			 s->cfg.mountpoint);
		return -EIO;
	}
	rc = fs_handover_fresh(s, s->se);
	if (rc < 0)
		return rc;
	s->started_ns = mcfs_now_ns();
	return fs_push_start(s);
}

static int serve(struct fs_session *s)
{
	struct fuse_loop_config *lc = fuse_loop_cfg_create();
	int rc;

	if (!lc)
		return -ENOMEM;
	/* One /dev/fuse descriptor per worker: no contention on one queue. But
	 * the kernel ends the requests a worker's clone had read when the clone
	 * closes, even with the connection held: a mount kept across restarts
	 * reads them all on the held descriptor, whose requests it resends. */
	fuse_loop_cfg_set_clone_fd(lc, s->ho.state_fd >= 0 ? 0 : 1);
	fuse_loop_cfg_set_max_threads(lc, s->cfg.max_threads);
	fuse_loop_cfg_set_idle_threads(lc, s->cfg.max_threads);
	rc = fuse_session_loop_mt(s->se, lc);
	fuse_loop_cfg_destroy(lc);
	if (atomic_load(&s->ho.upgrade))
		return rc < 0 ? rc : 0; /* the holder keeps the mount for the next daemon */
	if (s->ho.resume) {
		/* Mounted by an earlier daemon: libfuse does not know the mount point. */
		if (umount2(s->cfg.mountpoint, MNT_DETACH) < 0 && errno != EINVAL)
			MCFS_WARN("unmount %s: %s", s->cfg.mountpoint, strerror(errno));
	} else {
		fuse_session_unmount(s->se);
	}
	return rc < 0 ? rc : 0;
}

struct ready_ctx {
	struct fs_session *s;
	struct fs_stopper *st;
	int ready_fd; /* daemon mode: the parent waits for one byte; -1 in the foreground */
};

/*
 * Asks the new mount two questions from a child process: a stat of its root
 * (is it answering?) and a size probe of the stats xattr, which the kernel
 * never caches, so it reaches the daemon and shows whether requests come
 * over io_uring (fs_conn_check). Returns 0, or the stat's negative errno.
 *
 * Why a child and not this thread: a request to our own mount waits in the
 * kernel until our loop answers it. If the daemon is killed meanwhile (a
 * crash, `kill -9` at start-up), a thread of ours stuck in that wait keeps
 * the process, and with it the /dev/fuse descriptor that would end the wait,
 * alive forever: an unkillable zombie. The child closes every descriptor it
 * inherited, so it holds none of the connection; when the daemon dies the
 * kernel aborts the connection and the child's request ends with ENOTCONN.
 * Between fork() and _exit() the child makes system calls only, as a child
 * of a threaded process must.
 */
static int probe_mount(const char *mountpoint)
{
	struct stat st;
	pid_t pid, got;
	int status;

	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		/* Not even a copy of the /dev/fuse descriptors: holding one would
		 * keep the connection alive after the daemon's death. */
		(void)close_range(3, ~0u, 0);
		if (stat(mountpoint, &st) < 0)
			_exit(errno & 0x7f ? errno & 0x7f : EIO);
		(void)getxattr(mountpoint, "user.mcfs.stats", NULL, 0);
		_exit(0);
	}
	do {
		got = waitpid(pid, &status, 0);
	} while (got < 0 && errno == EINTR);
	if (got < 0)
		return -errno;
	if (!WIFEXITED(status))
		return -EIO;
	return -WEXITSTATUS(status);
}

/*
 * Runs beside the loop until the mount answers: the kernel applies the INIT
 * reply's max_readahead to the bdi, so read_ahead_kb can only be raised after
 * INIT, and "ready" means a stat of the mount point worked.
 */
static void *ready_thread(void *arg)
{
	struct ready_ctx *r = arg;
	struct fs_session *s = r->s;
	struct cache_stats cs;
	char b[32];
	int rc;

	pthread_setname_np(pthread_self(), "mcfs-ready");
	rc = probe_mount(s->cfg.mountpoint);
	if (rc < 0) {
		MCFS_ERR("the new mount %s does not answer: %s", s->cfg.mountpoint, strerror(-rc));
		fs_stop_request(r->st);
		return NULL;
	}
	if (fs_conn_check(s) < 0) {
		fs_stop_request(r->st);
		return NULL;
	}
	fs_mount_set_readahead(s->cfg.mountpoint, s->cfg.read_ahead_kb);
	cache_get_stats(s->cache, &cs); /* the block size and slots the cache settled on */
	MCFS_INFO("mounted %s on %s (%s store, block %s, RAM tier %llu slots)", s->cfg.source_shown,
		  s->cfg.mountpoint, cache_store_kind(s->cache),
		  mcfs_fmt_bytes(cs.block_size, b, sizeof(b)), (unsigned long long)cs.slots);
	if (r->ready_fd >= 0) {
		int nul = open("/dev/null", O_RDWR);

		mcfs_log_setup(mcfs_log_level(), true); /* `mcfs log-level` may have set it */
		if (nul >= 0) {
			dup2(nul, STDIN_FILENO);
			dup2(nul, STDOUT_FILENO);
			dup2(nul, STDERR_FILENO);
			if (nul > STDERR_FILENO)
				close(nul);
		}
		if (write(r->ready_fd, "1", 1) != 1)
			MCFS_WARN("could not tell the parent process that the mount is ready");
		close(r->ready_fd);
	}
	return NULL;
}

/* Mounts and serves until unmounted; in daemon mode tells the parent through @ready_fd. */
static int run_mount(struct fs_session *s, int ready_fd)
{
	struct fs_metrics *metrics = NULL;
	struct fs_stopper st = {.s = s};
	struct ready_ctx r = {.s = s, .st = &st, .ready_fd = ready_fd};
	pthread_t tid;
	int rc;

	/* A foreground daemon's stderr is a log file or a container's: stamp it
	 * from here on (the command's own checks above read as any command's). */
	if (ready_fd < 0)
		mcfs_log_style(strcmp(s->cfg.log_format, "json") == 0, true);

	rc = fs_stopper_start(&st);
	if (rc == 0)
		rc = setup(s);
	if (rc == 0)
		rc = fs_metrics_start(s, &metrics);
	if (rc == 0) {
		pthread_mutex_lock(&st.lock);
		st.se = s->se;
		if (atomic_load(&st.requested)) /* a signal during start-up */
			fuse_session_exit(s->se);
		pthread_mutex_unlock(&st.lock);
		rc = -pthread_create(&tid, NULL, ready_thread, &r);
	}
	if (rc < 0) {
		if (st.started)
			fs_stopper_stop(&st);
		if (s->se && fuse_session_fd(s->se) >= 0)
			fuse_session_unmount(s->se);
		teardown(s);
		return 1;
	}
	rc = serve(s);
	fs_stopper_stop(&st);
	pthread_join(tid, NULL);
	if (atomic_load(&s->ho.upgrade))
		MCFS_INFO("handed %s over: its holder starts the next daemon", s->cfg.mountpoint);
	else
		MCFS_INFO("unmounted %s", s->cfg.mountpoint);
	fs_metrics_stop(metrics);
	teardown(s);
	if (atomic_load(&s->ho.upgrade))
		return FS_HANDOVER_EXIT;
	return rc < 0 ? 1 : 0;
}

/* The command line as given: the supervisor starts its daemons with it. */
static int fs_argc;
static char **fs_argv;

/* Forks; the parent waits for the child's "ready" byte or its death. The
 * child serves, or (@supervise) runs the supervisor, whose child serves. */
static int daemonize_and_run(struct fs_session *s, bool supervise)
{
	int pfd[2], status;
	pid_t pid;
	char c;

	if (pipe2(pfd, O_CLOEXEC) < 0) {
		MCFS_ERR("pipe: %s", strerror(errno));
		return 1;
	}
	pid = fork();
	if (pid < 0) {
		MCFS_ERR("fork: %s", strerror(errno));
		return 1;
	}
	if (pid == 0) {
		close(pfd[0]);
		setsid();
		/* The supervisor keeps the directory: its daemons read relative paths of the
		 * command line. */
		if (!supervise && chdir("/") < 0)
			MCFS_WARN("chdir /: %s", strerror(errno));
		_exit(supervise ? fs_supervise(fs_argc, fs_argv, pfd[1], s->cfg.mountpoint)
				: run_mount(s, pfd[1]));
	}
	close(pfd[1]);
	if (read(pfd[0], &c, 1) == 1)
		return 0;
	/* the child died or failed before the mount was ready: it said why */
	if (waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) != 0)
		return WEXITSTATUS(status);
	return 1;
}

static int cmd_mount(int argc, char **argv)
{
	static struct fs_session sess; /* the one session: lives until exit */
	char abs[CFG_STR_MAX];
	bool supervised;
	int rc, ready_fd = -1;

	cfg_init(&sess.cfg);
	pthread_mutex_init(&sess.handles_lock, NULL);
	pthread_mutex_init(&sess.opens_lock, NULL);
	pthread_cond_init(&sess.opens_idle, NULL);
	rc = parse_mount_args(argc, argv, &sess.cfg);
	if (rc)
		return rc;
	mcfs_log_setup(sess.cfg.log_level, false);
	mcfs_log_style(strcmp(sess.cfg.log_format, "json") == 0, false);
	supervised = getenv("MCFS_SUPERVISED") != NULL;
	if (supervised) { /* the supervisor's child: in its foreground, told where "ready" goes */
		const char *r = getenv("MCFS_READY_FD");

		ready_fd = r ? atoi(r) : -1;
		unsetenv("MCFS_SUPERVISED");
		unsetenv("MCFS_READY_FD");
		if (ready_fd >= 0)
			(void)fcntl(ready_fd, F_SETFD, FD_CLOEXEC);
	}
	if (fs_handover_init(&sess) < 0)
		return 1;
	if (sess.ho.resume) {
		/* The mount is up and nothing answers it yet: a stat of it would wait
		 * for this daemon. The path is the one it was mounted on. */
		if (sess.cfg.mountpoint[0] != '/') {
			char cwd[CFG_STR_MAX / 2];

			if (!getcwd(cwd, sizeof(cwd))) {
				MCFS_ERR("resuming %s: getcwd: %s", sess.cfg.mountpoint,
					 strerror(errno));
				return 1;
			}
			snprintf(abs, sizeof(abs), "%s/%.*s", cwd, (int)(sizeof(abs) / 2 - 2),
				 sess.cfg.mountpoint);
			snprintf(sess.cfg.mountpoint, sizeof(sess.cfg.mountpoint), "%s", abs);
		}
		return supervised	     ? run_mount(&sess, ready_fd)
		       : sess.cfg.foreground ? run_mount(&sess, -1)
					     : daemonize_and_run(&sess, false);
	}
	rc = fs_mount_check_target(sess.cfg.mountpoint, abs, sizeof(abs));
	if (rc == -ENOTCONN) {
		/* A crashed daemon's mount with nothing holding it: its readers already
		 * see ENOTCONN; detach it so that this one can serve the path. */
		MCFS_WARN("%s is a dead mount of a daemon that is gone: unmounting it lazily",
			  sess.cfg.mountpoint);
		if (umount2(sess.cfg.mountpoint, MNT_DETACH) < 0 &&
		    fs_umount(sess.cfg.mountpoint, true) < 0)
			return 1;
		rc = fs_mount_check_target(sess.cfg.mountpoint, abs, sizeof(abs));
	}
	if (rc < 0)
		return 1;
	snprintf(sess.cfg.mountpoint, sizeof(sess.cfg.mountpoint), "%s", abs);
	if (strstr(sess.cfg.source, "://") == NULL && sess.cfg.source[0] != '/') {
		/* a relative directory: make it absolute before the daemon leaves the cwd */
		char *real = realpath(sess.cfg.source, NULL);

		if (!real) {
			MCFS_ERR("source directory %s: %s", sess.cfg.source, strerror(errno));
			return 1;
		}
		cfg_set_source(&sess.cfg, real);
		free(real);
	}
	if (supervised)
		return run_mount(&sess, ready_fd);
	if (sess.cfg.supervise) /* handover.h: the daemon runs as its child */
		return sess.cfg.foreground ? fs_supervise(fs_argc, fs_argv, -1, sess.cfg.mountpoint)
					   : daemonize_and_run(&sess, true);
	if (sess.cfg.foreground)
		return run_mount(&sess, -1);
	return daemonize_and_run(&sess, false);
}

static int cmd_umount(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"lazy", no_argument, NULL, 'l'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
	bool lazy = false;
	int c;

	optind = 1;
	opterr = 0;
	for (;;) {
		c = getopt_long(argc, argv, ":lh", longopts, NULL);
		if (c == -1)
			break;
		if (c == 'l')
			lazy = true;
		else if (c == 'h')
			return fs_cli_help("umount");
		else
			return fs_cli_bad_option("umount", c, argv);
	}
	if (argc - optind != 1) {
		MCFS_ERR("umount needs one MOUNTPOINT");
		return fs_cli_usage("umount");
	}
	return fs_umount(argv[optind], lazy) < 0 ? 1 : 0;
}

/*
 * A first word that is no command may be a SOURCE: mount(8) and fstab run
 * `mcfs SOURCE MOUNTPOINT -o ...`. A source names a path or a URL, so it holds
 * a '/' (file://, http://, s3://, /dir, ./dir) or is there (a relative
 * directory); a mistyped command ("stauts") is neither.
 */
static bool looks_like_source(const char *word)
{
	return strchr(word, '/') != NULL || access(word, F_OK) == 0;
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "";

	fs_argc = argc;
	fs_argv = argv;
	signal(SIGPIPE, SIG_IGN);
	if (argc < 2) {
		fs_cli_print_usage(stderr);
		return FS_EXIT_USAGE;
	}
	if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0)
		cmd = "help";
	if (strcmp(cmd, "--version") == 0)
		cmd = "version";
	if (fs_cli_known(cmd) && strcmp(cmd, "help") != 0 && fs_cli_wants_help(argc - 1, argv + 1))
		return fs_cli_help(cmd);
	if (strcmp(cmd, "mount") == 0)
		return cmd_mount(argc - 1, argv + 1);
	if (strcmp(cmd, "umount") == 0 || strcmp(cmd, "unmount") == 0)
		return cmd_umount(argc - 1, argv + 1);
	if (strcmp(cmd, "manifest") == 0) {
		if (argc != 3) {
			fprintf(stderr, "usage: mcfs manifest DIR > DIR/.mcfs-manifest.json\n");
			return EXIT_USAGE;
		}
		return cache_write_manifest(argv[2], stdout) < 0 ? 1 : 0;
	}
	if (strcmp(cmd, "prefetch") == 0)
		return fs_cmd_prefetch(argc - 1, argv + 1);
	if (strcmp(cmd, "status") == 0)
		return fs_cmd_status(argc - 1, argv + 1);
	if (strcmp(cmd, "evict") == 0)
		return fs_cmd_evict(argc - 1, argv + 1);
	if (strcmp(cmd, "refresh") == 0)
		return fs_cmd_refresh(argc - 1, argv + 1);
	if (strcmp(cmd, "log-level") == 0)
		return fs_cmd_log_level(argc - 1, argv + 1);
	if (strcmp(cmd, "help-config") == 0) {
		printf("mcfs options (-o key=value, or key = value in a config file):\n");
		cfg_print_keys(stdout);
		return 0;
	}
	if (strcmp(cmd, "version") == 0) {
		/* Says whether loads can take the GPU path, and with which runtime
		 * (its version sets the oldest driver it runs on). */
		printf("mcfs %s (GPU fast path: %s)\n", MCFS_VERSION, MCFS_GPU_BUILD);
		fs_conn_print_version(stdout); /* libfuse: version, features */
		return 0;
	}
	if (strcmp(cmd, "help") == 0) {
		if (argc > 2 && fs_cli_wants_help(2, argv + 1)) {
			fs_cli_print_usage(stdout);
			return 0;
		}
		if (argc > 2 && fs_cli_known(argv[2]))
			return fs_cli_help(argv[2]);
		if (argc > 2)
			return fs_cli_unknown(argv[2], 0);
		fs_cli_print_usage(stdout);
		return 0;
	}
	if (argc >= 3 && looks_like_source(cmd))
		return cmd_mount(argc, argv); /* mount.fuse3's form: mcfs SOURCE MNT -o ... */
	return fs_cli_unknown(cmd, argc);
}
