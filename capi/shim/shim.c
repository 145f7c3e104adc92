/* libibverbs.so.1 is this shim: it loads the Go library that implements the
 * verbs, libsoftrdma-verbs.so (capi/libibverbs), from its own directory at the
 * first verb a program calls, not when the program starts.
 *
 * Why: a c-shared Go library starts the Go runtime (its threads) in its
 * constructor, and a forked child has only the thread that forked, so a child
 * cannot run Go code (golang/go#15538): its first verb waited forever, with its
 * signals blocked. Loaded at the first verb, the runtime starts in the process
 * that uses it: a program may fork (workers, a daemon) before it opens a
 * device, and the parent and each child then use the library. A child forked
 * after the library was loaded still cannot: its verbs fail at once (ENOSYS,
 * or NULL with errno ENOSYS) and SOFTRDMA_DEBUG says why, rather than hang.
 *
 * Every exported function but the few below is a trampoline (genshim writes
 * them from the Go library's own exports) that jumps through sr_tab, which
 * sr_resolve fills by name. The Go library is linked -Bsymbolic, so its own
 * calls stay inside it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

/* In the generated trampolines (genshim). */
extern void *sr_tab[] __attribute__((visibility("hidden")));
extern const char *const sr_names[] __attribute__((visibility("hidden")));
extern const int sr_ntab __attribute__((visibility("hidden")));

static char sr_golib[PATH_MAX + 32];
static pthread_once_t sr_once = PTHREAD_ONCE_INIT;

/* sr_find_golib records where the Go library is, beside this file, while the
 * path this file was loaded from still means what it meant (the program may
 * chdir before its first verb). */
__attribute__((constructor)) static void sr_find_golib(void)
{
	Dl_info di;
	char self[PATH_MAX];
	const char *name = "libsoftrdma-verbs.so";
	if (!dladdr((void *)sr_find_golib, &di) || !di.dli_fname || !realpath(di.dli_fname, self)) {
		snprintf(sr_golib, sizeof(sr_golib), "%s", name);
		return;
	}
	char *slash = strrchr(self, '/');
	if (slash)
		*slash = 0;
	snprintf(sr_golib, sizeof(sr_golib), "%s/%s", self, name);
}

/* The refusals a child forked after the load gets: it cannot run the Go
 * runtime its parent started. */
static int sr_forked_said;

static void sr_say_forked(void)
{
	const char *d = getenv("SOFTRDMA_DEBUG");
	if (d && *d && !sr_forked_said) {
		sr_forked_said = 1;
		fprintf(stderr, "softrdma: this process was forked after its parent started the library "
				"(the Go runtime does not survive fork): verbs fail with ENOSYS; "
				"fork before the first verb, or exec\n");
	}
}

static long sr_refuse_int(void)
{
	sr_say_forked();
	errno = ENOSYS;
	return ENOSYS;
}

static void *sr_refuse_ptr(void)
{
	sr_say_forked();
	errno = ENOSYS;
	return NULL;
}

/* Verbs that return a pointer (verbs.h), refused with NULL; the rest return
 * an int or nothing, refused with ENOSYS. */
static int sr_returns_pointer(const char *n)
{
	static const char *const p[] = {"ibv_get_device_list", "ibv_get_device_name", "ibv_open_device",
		"ibv_alloc_pd", "ibv_reg_mr", "ibv_reg_mr_iova", "ibv_reg_mr_iova2", "ibv_reg_dmabuf_mr",
		"ibv_create_comp_channel", "ibv_create_cq", "ibv_create_srq", "ibv_create_qp", "ibv_create_ah",
		"ibv_create_ah_from_wc", "ibv_qp_to_qp_ex", "ibv_import_device", "ibv_import_pd", "ibv_import_mr",
		"ibv_import_dm", "ibv_get_sysfs_path", "ibv_node_type_str", "ibv_port_state_str",
		"ibv_wc_status_str", "ibv_event_type_str", "ibv_alloc_mw", NULL};
	for (int i = 0; p[i]; i++)
		if (!strcmp(n, p[i]))
			return 1;
	return 0;
}

static void sr_after_fork_child(void)
{
	for (int i = 0; i < sr_ntab; i++)
		sr_tab[i] = sr_returns_pointer(sr_names[i]) ? (void *)sr_refuse_ptr : (void *)sr_refuse_int;
}

/* sig.c: sets sr_sig_risky if a handler without SA_ONSTACK exists now. */
extern void sr_sig_scan(const char *when) __attribute__((visibility("hidden")));

static void sr_load(void)
{
	/* Before the Go runtime starts (it adds SA_ONSTACK to the handlers it
	 * finds, but that races with its first calls). */
	sr_sig_scan("installed before the first verb");
	void *h = dlopen(sr_golib, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "softrdma: cannot load %s: %s\n", sr_golib, dlerror());
		abort();
	}
	for (int i = 0; i < sr_ntab; i++) {
		void *f = dlsym(h, sr_names[i]);
		if (!f) {
			fprintf(stderr, "softrdma: %s has no %s\n", sr_golib, sr_names[i]);
			abort();
		}
		sr_tab[i] = f;
	}
	pthread_atfork(NULL, NULL, sr_after_fork_child);
}

/* sr_resolve loads the Go library once; the lazy stubs call it. */
__attribute__((visibility("hidden"))) void sr_resolve(void)
{
	pthread_once(&sr_once, sr_load);
}

/* ibv_fork_init: rdma-core returns 0 where fork needs no preparation
 * (IBV_FORK_UNNEEDED: the kernel copies pinned pages on fork); softrdma pins
 * nothing, the regions are the program's own memory. Neither call loads the
 * Go library, so a program may call them and then fork. */
int ibv_fork_init(void)
{
	return 0;
}

enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}
