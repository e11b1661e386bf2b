// SPDX-License-Identifier: GPL-2.0
/*
 * Guest driver for the pvgpu shared window.
 *
 * The window is an ivshmem PCI device (1af4:1110) whose BAR2 is host memory
 * starting with a pvgpu window header (window.h, from common/ in the pvgpu
 * sources and beside this file in a DKMS tree).  ivshmem devices without
 * that header are left alone, so other drivers can have them.
 *
 * Each window becomes /dev/pvgpuN: mmap of the whole window (cacheable: BAR2
 * is host RAM, and an uncached mapping makes copies crawl), PVGPU_IOC_INFO,
 * and on ivshmem-doorbell with MSI-X, PVGPU_IOC_RING plus interrupt waits
 * through read() and poll().  See pvgpu_ioctl.h for the user interface.
 *
 * Lifetime: the device state is reference counted.  The PCI binding holds
 * one reference and every open file one more; a user mapping holds its file.
 * Unbinding gives up the interrupt, the registers and the PCI regions at
 * once, but the window's kernel mapping (and so the memory type reservation
 * behind user mappings) stays until the last reference is dropped, so files
 * that are open or mapped keep working until closed.  Module unload waits
 * for them (the file operations belong to the module).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/atomic.h>
#include <linux/fs.h>
#include <linux/idr.h>
#include <linux/interrupt.h>
#include <linux/io.h>
#include <linux/kref.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/poll.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/wait.h>

#if defined(CONFIG_X86) && defined(PVGPU_HAVE_PAT_QUERY)
#include <asm/memtype.h>
#endif

#include "pvgpu_ioctl.h"
#include "window.h"

#define PVGPU_PCI_VENDOR	0x1af4	/* Red Hat, Inc. (QEMU) */
#define PVGPU_PCI_DEVICE	0x1110	/* Inter-VM shared memory */

#define PVGPU_REG_BAR		0
#define PVGPU_WINDOW_BAR	2

/* ivshmem registers in BAR0 (QEMU's docs/specs/ivshmem-spec.rst). */
#define IVSHMEM_IV_POSITION	0x08
#define IVSHMEM_DOORBELL	0x0c
#define IVSHMEM_REG_MIN_SIZE	0x10

struct pvgpu_dev {
	struct kref ref;
	struct pci_dev *pdev;		/* counted: pci_dev_get() */
	struct miscdevice misc;
	char name[24];
	int index;

	/* Fixed at probe, valid until the last reference. */
	void *window;			/* BAR2, memremap(MEMREMAP_WB) */
	phys_addr_t phys;
	resource_size_t size;
	u64 window_id;
	u32 layout;
	bool doorbell;			/* MSI-X interrupt and BAR0 in use */
	s32 peer_id;

	struct mutex lock;		/* serialises RING against unbind */
	void __iomem *regs;		/* BAR0; NULL without doorbell */
	bool gone;			/* unbound; written under lock */

	atomic64_t events;		/* interrupts received */
	wait_queue_head_t wait;
};

struct pvgpu_file {
	struct pvgpu_dev *dev;
	atomic64_t seen;		/* events count last read */
};

static DEFINE_IDA(pvgpu_ida);

static void pvgpu_free(struct kref *ref)
{
	struct pvgpu_dev *dev = container_of(ref, struct pvgpu_dev, ref);

	memunmap(dev->window);
	pci_dev_put(dev->pdev);
	kfree(dev);
}

static int pvgpu_open(struct inode *inode, struct file *file)
{
	/* misc_open() set private_data and holds misc_mtx around this call,
	 * so pvgpu_remove() cannot drop the binding's reference meanwhile.
	 */
	struct pvgpu_dev *dev = container_of(file->private_data,
					     struct pvgpu_dev, misc);
	struct pvgpu_file *pf;

	pf = kzalloc(sizeof(*pf), GFP_KERNEL);
	if (!pf)
		return -ENOMEM;

	kref_get(&dev->ref);
	pf->dev = dev;
	atomic64_set(&pf->seen, atomic64_read(&dev->events));
	file->private_data = pf;
	return 0;
}

static int pvgpu_release(struct inode *inode, struct file *file)
{
	struct pvgpu_file *pf = file->private_data;

	kref_put(&pf->dev->ref, pvgpu_free);
	kfree(pf);
	return 0;
}

static int pvgpu_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct pvgpu_file *pf = file->private_data;
	struct pvgpu_dev *dev = pf->dev;
	unsigned long npages = dev->size >> PAGE_SHIFT;
	unsigned long len = vma->vm_end - vma->vm_start;

	if (READ_ONCE(dev->gone))
		return -ENODEV;
	/* The window is shared by nature; a private copy makes no sense. */
	if (!(vma->vm_flags & VM_SHARED))
		return -EINVAL;
	if (vma->vm_pgoff >= npages ||
	    (len >> PAGE_SHIFT) > npages - vma->vm_pgoff)
		return -EINVAL;

	/* vm_page_prot is the ordinary (write-back) protection: BAR2 is
	 * host RAM and memremap() reserved it write-back, so the types agree.
	 */
	return remap_pfn_range(vma, vma->vm_start,
			       PHYS_PFN(dev->phys) + vma->vm_pgoff,
			       len, vma->vm_page_prot);
}

static long pvgpu_ioctl_info(struct pvgpu_dev *dev, void __user *argp)
{
	struct pvgpu_info info;

	memset(&info, 0, sizeof(info));
	info.window_id = dev->window_id;
	info.size = dev->size;
	info.layout = dev->layout;
	info.peer_id = dev->peer_id;
	if (READ_ONCE(dev->gone)) {
		info.flags |= PVGPU_INFO_UNBOUND;
	} else if (dev->doorbell) {
		info.flags |= PVGPU_INFO_DOORBELL;
		info.vectors = 1;
	}

	if (copy_to_user(argp, &info, sizeof(info)))
		return -EFAULT;
	return 0;
}

static long pvgpu_ioctl_ring(struct pvgpu_dev *dev, void __user *argp)
{
	struct pvgpu_doorbell ring;
	long ret = 0;

	if (copy_from_user(&ring, argp, sizeof(ring)))
		return -EFAULT;
	if (ring.peer > 0xffff || ring.vector > 0xffff)
		return -EINVAL;

	mutex_lock(&dev->lock);
	if (dev->gone)
		ret = -ENODEV;
	else if (!dev->doorbell)
		ret = -EOPNOTSUPP;
	else
		writel((ring.peer << 16) | ring.vector,
		       dev->regs + IVSHMEM_DOORBELL);
	mutex_unlock(&dev->lock);
	return ret;
}

static long pvgpu_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct pvgpu_file *pf = file->private_data;
	void __user *argp = (void __user *)arg;

	switch (cmd) {
	case PVGPU_IOC_INFO:
		return pvgpu_ioctl_info(pf->dev, argp);
	case PVGPU_IOC_RING:
		return pvgpu_ioctl_ring(pf->dev, argp);
	default:
		return -ENOTTY;
	}
}

static bool pvgpu_pending(struct pvgpu_file *pf)
{
	return atomic64_read(&pf->dev->events) != atomic64_read(&pf->seen);
}

static ssize_t pvgpu_read(struct file *file, char __user *buf, size_t count,
			  loff_t *ppos)
{
	struct pvgpu_file *pf = file->private_data;
	struct pvgpu_dev *dev = pf->dev;
	u64 events;
	int ret;

	if (count < sizeof(events))
		return -EINVAL;
	if (!dev->doorbell)
		return -EOPNOTSUPP;

	for (;;) {
		if (READ_ONCE(dev->gone))
			return -ENODEV;
		if (pvgpu_pending(pf))
			break;
		if (file->f_flags & O_NONBLOCK)
			return -EAGAIN;
		ret = wait_event_interruptible(dev->wait,
					       pvgpu_pending(pf) ||
					       READ_ONCE(dev->gone));
		if (ret)
			return ret;
	}

	events = atomic64_read(&dev->events);
	if (copy_to_user(buf, &events, sizeof(events)))
		return -EFAULT;
	atomic64_set(&pf->seen, events);
	return sizeof(events);
}

static __poll_t pvgpu_poll(struct file *file, poll_table *wait)
{
	struct pvgpu_file *pf = file->private_data;
	struct pvgpu_dev *dev = pf->dev;

	poll_wait(file, &dev->wait, wait);
	if (READ_ONCE(dev->gone))
		return EPOLLHUP | EPOLLERR;
	if (dev->doorbell && pvgpu_pending(pf))
		return EPOLLIN | EPOLLRDNORM;
	return 0;
}

static const struct file_operations pvgpu_fops = {
	.owner		= THIS_MODULE,
	.open		= pvgpu_open,
	.release	= pvgpu_release,
	.mmap		= pvgpu_mmap,
	.unlocked_ioctl	= pvgpu_ioctl,
	.compat_ioctl	= compat_ptr_ioctl,
	.read		= pvgpu_read,
	.poll		= pvgpu_poll,
	.llseek		= noop_llseek,
};

/* sysfs attributes of /sys/class/misc/pvgpuN, for udev rules and people. */
static struct pvgpu_dev *pvgpu_from_device(struct device *d)
{
	struct miscdevice *misc = dev_get_drvdata(d);

	return container_of(misc, struct pvgpu_dev, misc);
}

static ssize_t window_id_show(struct device *d, struct device_attribute *attr,
			      char *buf)
{
	return sysfs_emit(buf, "%llu\n", pvgpu_from_device(d)->window_id);
}
static DEVICE_ATTR_RO(window_id);

static ssize_t window_size_show(struct device *d,
				struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%llu\n",
			  (unsigned long long)pvgpu_from_device(d)->size);
}
static DEVICE_ATTR_RO(window_size);

static ssize_t doorbell_show(struct device *d, struct device_attribute *attr,
			     char *buf)
{
	return sysfs_emit(buf, "%d\n", pvgpu_from_device(d)->doorbell);
}
static DEVICE_ATTR_RO(doorbell);

static struct attribute *pvgpu_attrs[] = {
	&dev_attr_window_id.attr,
	&dev_attr_window_size.attr,
	&dev_attr_doorbell.attr,
	NULL,
};
ATTRIBUTE_GROUPS(pvgpu);

static irqreturn_t pvgpu_irq(int irq, void *data)
{
	struct pvgpu_dev *dev = data;

	atomic64_inc(&dev->events);
	wake_up_interruptible_all(&dev->wait);
	return IRQ_HANDLED;
}

/*
 * ivshmem-doorbell has MSI-X (BAR1) and registers in BAR0; ivshmem-plain
 * has the registers but neither interrupts nor peers.  A doorbell device
 * whose interrupt cannot be set up still serves its window: say so and go on
 * without the doorbell.
 */
static void pvgpu_setup_doorbell(struct pvgpu_dev *dev)
{
	struct pci_dev *pdev = dev->pdev;
	int ret;

	if (!pdev->msix_cap ||
	    !(pci_resource_flags(pdev, PVGPU_REG_BAR) & IORESOURCE_MEM) ||
	    pci_resource_len(pdev, PVGPU_REG_BAR) < IVSHMEM_REG_MIN_SIZE)
		return;

	ret = pci_request_region(pdev, PVGPU_REG_BAR, KBUILD_MODNAME);
	if (ret)
		goto err;

	dev->regs = pci_iomap(pdev, PVGPU_REG_BAR, IVSHMEM_REG_MIN_SIZE);
	if (!dev->regs) {
		ret = -ENOMEM;
		goto err_release;
	}

	ret = pci_alloc_irq_vectors(pdev, 1, 1, PCI_IRQ_MSIX);
	if (ret < 0)
		goto err_unmap;

	ret = request_irq(pci_irq_vector(pdev, 0), pvgpu_irq, 0, dev->name,
			  dev);
	if (ret)
		goto err_vectors;

	/* MSI-X messages are memory writes by the device. */
	pci_set_master(pdev);
	dev->peer_id = readl(dev->regs + IVSHMEM_IV_POSITION);
	dev->doorbell = true;
	return;

err_vectors:
	pci_free_irq_vectors(pdev);
err_unmap:
	pci_iounmap(pdev, dev->regs);
	dev->regs = NULL;
err_release:
	pci_release_region(pdev, PVGPU_REG_BAR);
err:
	dev_warn(&pdev->dev, "no doorbell or interrupts (error %d); window only\n",
		 ret);
}

static void pvgpu_teardown_doorbell(struct pvgpu_dev *dev)
{
	struct pci_dev *pdev = dev->pdev;

	if (!dev->doorbell)
		return;
	pci_clear_master(pdev);
	free_irq(pci_irq_vector(pdev, 0), dev);
	pci_free_irq_vectors(pdev);
	pci_iounmap(pdev, dev->regs);
	dev->regs = NULL;
	pci_release_region(pdev, PVGPU_REG_BAR);
}

/*
 * memremap(MEMREMAP_WB) asks for write-back, but x86 turns that into
 * uncached-minus where the firmware's MTRRs say uncached, as SeaBIOS's do
 * for the whole 32-bit PCI hole.  A window above 4 GiB (a large one, or any
 * under OVMF) is write-back.  Say so when it is not: copies through the
 * window crawl wherever the hypervisor honours the guest's memory types.
 */
static void pvgpu_check_memtype(struct pci_dev *pdev, phys_addr_t start)
{
#if defined(CONFIG_X86) && defined(PVGPU_HAVE_PAT_QUERY)
	if (pat_enabled() && pat_pfn_immune_to_uc_mtrr(PHYS_PFN(start)))
		dev_warn(&pdev->dev,
			 "BAR2 at %pa is uncached, not write-back (the firmware's MTRRs cover it; place the window above 4 GiB)\n",
			 &start);
#endif
}

/*
 * Does this BAR2 hold a pvgpu window?  0 if so, -ENODEV if not.
 *
 * Only the first fields of the header matter here; the rest belongs to the
 * guest library and the host worker.  The host can rewrite the header at
 * any time, so each field is read once.  The window is little-endian
 * whatever the guest is, while window.h declares plain integers for the
 * sake of user space: hence the conversions.
 */
static int pvgpu_check_window(struct pci_dev *pdev, const void *window,
			      resource_size_t len, u64 *window_id, u32 *layout)
{
	const struct pvgpu_window_header *hdr = window;
	u32 magic;
	u64 size;

	magic = le32_to_cpu((__force __le32)READ_ONCE(hdr->magic));
	*layout = le32_to_cpu((__force __le32)READ_ONCE(hdr->layout));
	size = le64_to_cpu((__force __le64)READ_ONCE(hdr->size));
	*window_id = le64_to_cpu((__force __le64)READ_ONCE(hdr->window_id));

	if (magic != PVGPU_WINDOW_MAGIC || *layout != PVGPU_WINDOW_LAYOUT ||
	    size != len) {
		dev_info(&pdev->dev,
			 "not a pvgpu window (magic %#x, layout %u, size %llu, BAR2 %llu bytes); leaving it alone\n",
			 magic, *layout, size, (unsigned long long)len);
		return -ENODEV;
	}
	return 0;
}

static int pvgpu_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	resource_size_t start = pci_resource_start(pdev, PVGPU_WINDOW_BAR);
	resource_size_t len = pci_resource_len(pdev, PVGPU_WINDOW_BAR);
	struct pvgpu_dev *dev;
	void *window;
	u64 window_id;
	u32 layout;
	int ret;

	if (!(pci_resource_flags(pdev, PVGPU_WINDOW_BAR) & IORESOURCE_MEM) ||
	    len < PVGPU_WINDOW_HDR_SIZE || !PAGE_ALIGNED(start) ||
	    !PAGE_ALIGNED(len)) {
		dev_info(&pdev->dev,
			 "no usable BAR2 for a pvgpu window; leaving it alone\n");
		return -ENODEV;
	}

	ret = pci_enable_device_mem(pdev);
	if (ret)
		return ret;

	ret = pci_request_region(pdev, PVGPU_WINDOW_BAR, KBUILD_MODNAME);
	if (ret)
		goto err_disable;

	/* BAR2 is host RAM: map it write-back, never uncached. */
	window = memremap(start, len, MEMREMAP_WB);
	if (!window) {
		ret = -ENOMEM;
		goto err_release;
	}

	ret = pvgpu_check_window(pdev, window, len, &window_id, &layout);
	if (ret)
		goto err_unmap;
	pvgpu_check_memtype(pdev, start);

	dev = kzalloc(sizeof(*dev), GFP_KERNEL);
	if (!dev) {
		ret = -ENOMEM;
		goto err_unmap;
	}
	kref_init(&dev->ref);
	mutex_init(&dev->lock);
	init_waitqueue_head(&dev->wait);
	atomic64_set(&dev->events, 0);
	dev->pdev = pci_dev_get(pdev);
	dev->window = window;
	dev->phys = start;
	dev->size = len;
	dev->window_id = window_id;
	dev->layout = layout;
	dev->peer_id = -1;

	ret = ida_alloc(&pvgpu_ida, GFP_KERNEL);
	if (ret < 0)
		goto err_free;
	dev->index = ret;
	snprintf(dev->name, sizeof(dev->name), "pvgpu%d", dev->index);

	pvgpu_setup_doorbell(dev);

	dev->misc.minor = MISC_DYNAMIC_MINOR;
	dev->misc.name = dev->name;
	dev->misc.fops = &pvgpu_fops;
	dev->misc.parent = &pdev->dev;
	dev->misc.groups = pvgpu_groups;
	pci_set_drvdata(pdev, dev);
	ret = misc_register(&dev->misc);
	if (ret)
		goto err_doorbell;

	dev_info(&pdev->dev, "window %llu, %llu bytes, layout %u%s: /dev/%s\n",
		 window_id, (unsigned long long)len, layout,
		 dev->doorbell ? ", doorbell" : "", dev->name);
	return 0;

err_doorbell:
	pci_set_drvdata(pdev, NULL);
	pvgpu_teardown_doorbell(dev);
	ida_free(&pvgpu_ida, dev->index);
err_free:
	pci_dev_put(pdev);
	kfree(dev);
err_unmap:
	memunmap(window);
err_release:
	pci_release_region(pdev, PVGPU_WINDOW_BAR);
err_disable:
	pci_disable_device(pdev);
	return ret;
}

static void pvgpu_remove(struct pci_dev *pdev)
{
	struct pvgpu_dev *dev = pci_get_drvdata(pdev);

	/* No new opens; files already open keep their reference. */
	misc_deregister(&dev->misc);

	mutex_lock(&dev->lock);
	WRITE_ONCE(dev->gone, true);
	mutex_unlock(&dev->lock);
	wake_up_interruptible_all(&dev->wait);

	pvgpu_teardown_doorbell(dev);
	pci_release_region(pdev, PVGPU_WINDOW_BAR);
	pci_disable_device(pdev);
	ida_free(&pvgpu_ida, dev->index);
	pci_set_drvdata(pdev, NULL);

	dev_info(&pdev->dev, "unbound /dev/%s\n", dev->name);
	/* The window mapping goes with the last reference. */
	kref_put(&dev->ref, pvgpu_free);
}

static const struct pci_device_id pvgpu_ids[] = {
	{ PCI_DEVICE(PVGPU_PCI_VENDOR, PVGPU_PCI_DEVICE) },
	{ }
};
MODULE_DEVICE_TABLE(pci, pvgpu_ids);

static struct pci_driver pvgpu_driver = {
	.name		= KBUILD_MODNAME,
	.id_table	= pvgpu_ids,
	.probe		= pvgpu_probe,
	.remove		= pvgpu_remove,
};
module_pci_driver(pvgpu_driver);

MODULE_DESCRIPTION("pvgpu shared window (ivshmem) guest driver");
MODULE_LICENSE("GPL");
MODULE_VERSION("0.1");
