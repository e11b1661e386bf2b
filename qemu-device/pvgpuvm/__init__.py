"""pvgpu's host half of the VM device: window files, the VM registry that
pvgpud reads, QEMU arguments and libvirt XML for a vGPU, and the supervisor
of vhost-device-vsock.  The command-line front end is qemu-device/pvgpu-vm.
"""
