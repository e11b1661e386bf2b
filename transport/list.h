/*
 * list.h - the transport registry: one line per transport (DESIGN §1).
 *
 * BUILTIN(name): transport/name/ is linked in; its halves are
 * pvgpu_guest_name and pvgpu_host_name (either may be absent from a
 * program: the guest library links no host halves).
 * LOADABLE(name): transport-name.so, loaded at run time when a URI names
 * it (heavy dependencies: libxenvchan, libibverbs).
 */
BUILTIN(unix)
BUILTIN(tcp)
BUILTIN(shm)
BUILTIN(vsock)
LOADABLE(vchan)
LOADABLE(verbs)
