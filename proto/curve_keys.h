/*
 * curve_keys.h - CURVE key files of remote workers (docs/scheduler.md,
 * "Remote workers"). Shared by the coordinator (client), the worker
 * (server) and `coli keygen`.
 *
 * A key directory holds Z85 text files, one key each (40 characters and a
 * newline): coordinator.key / coordinator.pub, worker.key / worker.pub.
 * A .key file is a secret key and must not be readable by group or others
 * (mode 0600, as keygen writes it); a .pub file is a public key.
 *   coordinator side: coordinator.key, and worker-HOST-PORT.pub (one
 *                     worker's key) or worker.pub (shared by the workers)
 *   worker side:      worker.key, and the coordinators it accepts:
 *                     coordinator.pub and each line of authorized_coordinators
 */
#ifndef COLI_PROTO_CURVE_KEYS_H
#define COLI_PROTO_CURVE_KEYS_H

#include <stddef.h>

#define CURVE_KEY_CHARS 40
#define CURVE_MAX_AUTHORIZED 64

typedef char curve_key[CURVE_KEY_CHARS + 1];

/* 1 when libzmq was built with CURVE. */
int curve_available(void);

/* Read the key in dir/name. secret: the file must be a regular file that
 * group and others cannot read. Returns 0 or a coli_status naming the file. */
int curve_key_read(const char *dir, const char *name, int secret, curve_key key);

/* Write key to dir/name (mode 0600 when secret, else 0644); never replaces
 * an existing file. */
int curve_key_write(const char *dir, const char *name, const char *key, int secret);

/* The coordinator public keys a worker accepts (at least one, else an error). */
int curve_authorized_load(const char *dir, curve_key *keys, int cap, int *n);

/* Coordinator side: make sock a CURVE client of the worker at endpoint
 * (keys from dir, see above). */
int curve_client_setup(void *sock, const char *dir, const char *endpoint);

/* Worker side: make sock a CURVE server with dir/worker.key. */
int curve_server_setup(void *sock, const char *dir);

#endif
