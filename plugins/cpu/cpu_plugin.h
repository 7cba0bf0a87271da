/*
 * cpu_plugin.h - the cpu plugin: expert FFNs on this machine's cores.
 *
 * Built twice from the same objects: as build/lib/libcoli-cpu.so, which
 * exports only moe_plugin_get (plugins/plugin.map), and into libcolibri.a,
 * where the coordinator's in-process executor reaches the same vtable
 * through coli_cpu_plugin() without dlopen.
 *
 * Experts are used in place (the host pointers of moe_expert_desc, which
 * point into the mapped model file): load_expert copies nothing and only
 * counts the bytes against the budget. One device is driven by one thread
 * at a time; run uses all of the device's pool threads for each group.
 */
#ifndef COLI_PLUGINS_CPU_PLUGIN_H
#define COLI_PLUGINS_CPU_PLUGIN_H

#include "plugins/plugin_abi.h"

/* The cpu plugin's vtable (the same object moe_plugin_get returns). */
const struct moe_plugin *coli_cpu_plugin(void);

/* In-process only: open a device that computes on the caller's pool instead
 * of starting threads of its own (two pools on the same cores would hand
 * them back and forth at every MoE layer). The pool is borrowed: it must
 * outlive the device, and close() leaves it alone. Runs are made from the
 * thread that drives the pool, between its jobs (coli_pool_run is not
 * reentrant). Otherwise as the vtable's open(). */
struct coli_pool;
int coli_cpu_plugin_open_shared(const moe_open_opts *opts, struct coli_pool *pool, moe_device **out, char *err,
                                size_t err_len);

/* The plugin's exported entry point (see plugin_abi.h). */
__attribute__((visibility("default"))) const struct moe_plugin *moe_plugin_get(void);

#endif
