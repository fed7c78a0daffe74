// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * rdma_trace.bpf.c: kprobes on the RDMA control path (ib_uverbs / ib_core) and one generic
 * tracepoint program for the rdma_cma events.
 *
 * The data path of RDMA bypasses the kernel; the control path does not: every reg_mr,
 * create_qp, modify_qp and destroy of a user-space program goes through ib_uverbs. These
 * programs record WHO (pid, comm), WHERE (device name) and WHAT (sizes, QP numbers, states,
 * errno, latency). They never read keys (lkey/rkey) or memory addresses: the kernel pointers
 * used as map keys stay inside the kernel.
 *
 * Kernel structures are declared here with only the fields we read and
 * preserve_access_index, so libbpf relocates every access against the running kernel's BTF
 * (vmlinux and the ib_core module): no vmlinux.h is needed at build time. The event layout
 * (struct rt_event) is mirrored by crates/rdma-trace/src/event.rs: change both together.
 */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* ---- the few kernel types we read (CO-RE relocated) ----
 * Enum fields must be declared as enums: CO-RE refuses an int local field for an enum
 * kernel field. Only the type names matter; the values are decoded in user space.
 */

enum ib_qp_type { IB_QPT_SMI };
enum ib_qp_state { IB_QPS_RESET_ };
enum ib_event_type { IB_EVENT_CQ_ERR };

struct kobject {
	const char *name;
} __attribute__((preserve_access_index));

struct device {
	struct kobject kobj;
} __attribute__((preserve_access_index));

enum rdma_driver_id { RDMA_DRIVER_RXE };

struct ib_device_ops {
	enum rdma_driver_id driver_id;
} __attribute__((preserve_access_index));

struct ib_device {
	struct device dev;
	struct ib_device_ops ops;
} __attribute__((preserve_access_index));

struct ib_qp {
	struct ib_device *device;
	__u32 qp_num;
} __attribute__((preserve_access_index));

struct ib_qp_init_attr {
	enum ib_qp_type qp_type;
} __attribute__((preserve_access_index));

struct ib_qp_attr {
	enum ib_qp_state qp_state;
} __attribute__((preserve_access_index));

/* rxe's QP (drivers/infiniband/sw/rxe/rxe_verbs.h): the driver's own copy of the state.
 * Only read when the rdma_rxe module's BTF has it (guarded by bpf_core_*_exists). */
struct rxe_qp {
	struct ib_qp ibqp;
	struct ib_qp_attr attr;
} __attribute__((preserve_access_index));

struct ib_mr {
	struct ib_device *device;
	__u64 length;
} __attribute__((preserve_access_index));

struct ib_event {
	struct ib_device *device;
	union {
		struct ib_qp *qp;
		__u32 port_num;
	} element;
	enum ib_event_type event;
} __attribute__((preserve_access_index));

/* ---- the event record (mirrored in event.rs) ---- */

enum rt_kind {
	RT_MR_REG = 1,
	RT_MR_DEREG = 2,
	RT_QP_CREATE = 3,
	RT_QP_MODIFY = 4,
	RT_QP_DESTROY = 5,
	RT_ASYNC_QP = 6,
	RT_ASYNC_CQ = 7,
	RT_ASYNC_DEVICE = 8,
	RT_CMA = 9,
};

#define RT_NO_STATE 0xff
#define IB_QP_STATE 1
#define IB_QPS_RESET 0
#define DEV_NAME_LEN 32
#define MAX_ERRNO 4095

struct rt_event {
	__u64 ts_ns;      /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u64 latency_ns; /* entry to return, 0 when not measured */
	__u64 size;       /* MR length in bytes */
	__u32 pid;        /* thread group id */
	__u32 tid;
	__s32 ret;        /* 0 or -errno */
	__u32 kind;       /* enum rt_kind */
	__u32 qp_num;
	__u32 qp_type;
	__u32 from_state; /* RT_NO_STATE when unknown */
	__u32 to_state;   /* RT_NO_STATE when the call changes no state */
	__u32 attr_mask;
	__u32 event_type; /* ib_event_type, or the rdma_cm event */
	__u32 port;
	__u32 cookie;     /* rdma_cma: index of the tracepoint in user space's table */
	char comm[16];
	char dev[DEV_NAME_LEN];
	__u32 flags;      /* RT_FROM_DRIVER: from_state is the driver's, not the tracer's memory */
	__u32 reserved;
};

#define RT_FROM_DRIVER 1

/* What an entry probe leaves for its return probe, per thread. */
struct rt_pending {
	__u64 ts_ns;
	__u64 size;
	__u64 qp_ptr; /* map key only, never emitted */
	__u32 qp_num;
	__u32 qp_type;
	__u32 to_state;
	__u32 attr_mask;
	__u32 driver_state; /* RT_NO_STATE when the driver's state is not readable */
	char dev[DEV_NAME_LEN];
};

/*
 * Every submit uses BPF_RB_NO_WAKEUP and user space polls on a timer. A wakeup queues an
 * irq_work whose self-IPI can run softirqs (rxe's tasklets) inside the submitting program;
 * a kprobe hit there (e.g. SQ_DRAINED delivered by rxe's requester tasklet) would then be
 * skipped as BPF recursion. Measured in the lab: with wakeups that event never arrived.
 */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps");

/* One slot per call kind, keyed by tid. */
struct pending_key {
	__u32 tid;
	__u32 kind;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct pending_key);
	__type(value, struct rt_pending);
} pending SEC(".maps");

/* Last known state per QP (kernel pointer -> ib_qp_state), learnt at create and modify. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u32);
} qp_states SEC(".maps");

/* Events lost because the ring buffer was full (index 0). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

static __always_inline void read_dev_name(struct ib_device *dev, char *out)
{
	const char *name = NULL;

	if (!dev)
		return;
	name = BPF_CORE_READ(dev, dev.kobj.name);
	if (name)
		bpf_probe_read_kernel_str(out, DEV_NAME_LEN, name);
}

/* The QP state as the driver keeps it, where we know how to read it (rxe), else
 * RT_NO_STATE. This sees transitions the driver makes on its own (to ERR after a remote
 * access or retry error), which no modify call shows. */
static __always_inline __u32 driver_qp_state(struct ib_qp *qp)
{
	struct ib_device *dev;
	struct rxe_qp *rqp;

	if (!bpf_core_type_exists(struct rxe_qp) || !bpf_core_field_exists(struct rxe_qp, attr) ||
	    !bpf_core_field_exists(struct ib_device, ops.driver_id))
		return RT_NO_STATE;
	dev = BPF_CORE_READ(qp, device);
	if (!dev || BPF_CORE_READ(dev, ops.driver_id) !=
			    bpf_core_enum_value(enum rdma_driver_id, RDMA_DRIVER_RXE))
		return RT_NO_STATE;
	rqp = (struct rxe_qp *)((char *)qp - bpf_core_field_offset(struct rxe_qp, ibqp));
	return BPF_CORE_READ(rqp, attr.qp_state);
}

static __always_inline struct rt_event *reserve(__u32 kind)
{
	struct rt_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	__u64 id;

	if (!e) {
		__u32 zero = 0;
		__u64 *n = bpf_map_lookup_elem(&drops, &zero);

		if (n)
			__sync_fetch_and_add(n, 1);
		return NULL;
	}
	__builtin_memset(e, 0, sizeof(*e));
	id = bpf_get_current_pid_tgid();
	e->ts_ns = bpf_ktime_get_ns();
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->kind = kind;
	e->from_state = RT_NO_STATE;
	e->to_state = RT_NO_STATE;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	return e;
}

static __always_inline struct pending_key key_for(__u32 kind)
{
	struct pending_key k = {
		.tid = (__u32)bpf_get_current_pid_tgid(),
		.kind = kind,
	};
	return k;
}

static __always_inline struct rt_pending *start(__u32 kind)
{
	struct pending_key k = key_for(kind);
	struct rt_pending p = {};

	p.ts_ns = bpf_ktime_get_ns();
	p.to_state = RT_NO_STATE;
	p.driver_state = RT_NO_STATE;
	bpf_map_update_elem(&pending, &k, &p, BPF_ANY);
	return bpf_map_lookup_elem(&pending, &k);
}

static __always_inline struct rt_pending *current(__u32 kind)
{
	struct pending_key k = key_for(kind);

	return bpf_map_lookup_elem(&pending, &k);
}

static __always_inline void finish(__u32 kind)
{
	struct pending_key k = key_for(kind);

	bpf_map_delete_elem(&pending, &k);
}

/* The functions behind the int-returning probes return int: only the low 32 bits of the
 * return register are meaningful, so their return probes declare `int rc`. */
static __always_inline __s32 errno_of(int rc)
{
	return rc < 0 ? rc : 0;
}

static __always_inline void fill_from(struct rt_event *e, struct rt_pending *p)
{
	e->latency_ns = e->ts_ns - p->ts_ns;
	e->size = p->size;
	e->qp_num = p->qp_num;
	e->qp_type = p->qp_type;
	e->to_state = p->to_state;
	e->attr_mask = p->attr_mask;
	__builtin_memcpy(e->dev, p->dev, DEV_NAME_LEN);
}

/* ---- MR registration: ib_uverbs_reg_mr (whole command) + ib_umem_get (size, device) ---- */

SEC("kprobe")
int BPF_KPROBE(reg_mr_entry)
{
	start(RT_MR_REG);
	return 0;
}

SEC("kprobe")
int BPF_KPROBE(umem_get_entry, struct ib_device *dev, unsigned long addr, __u64 size)
{
	struct rt_pending *p = current(RT_MR_REG);

	/* addr is the user buffer: deliberately not read. */
	if (!p)
		return 0;
	p->size = size;
	read_dev_name(dev, p->dev);
	return 0;
}

SEC("kretprobe")
int BPF_KRETPROBE(reg_mr_exit, int rc)
{
	struct rt_pending *p = current(RT_MR_REG);
	struct rt_event *e;

	if (!p)
		return 0;
	e = reserve(RT_MR_REG);
	if (e) {
		fill_from(e, p);
		e->ret = errno_of(rc);
		bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	}
	finish(RT_MR_REG);
	return 0;
}

/* ---- MR deregistration: ib_dereg_mr_user(mr, udata) ---- */

SEC("kprobe")
int BPF_KPROBE(dereg_mr_entry, struct ib_mr *mr)
{
	struct rt_pending *p = start(RT_MR_DEREG);

	if (!p || !mr)
		return 0;
	p->size = BPF_CORE_READ(mr, length);
	read_dev_name(BPF_CORE_READ(mr, device), p->dev);
	return 0;
}

SEC("kretprobe")
int BPF_KRETPROBE(dereg_mr_exit, int rc)
{
	struct rt_pending *p = current(RT_MR_DEREG);
	struct rt_event *e;

	if (!p)
		return 0;
	e = reserve(RT_MR_DEREG);
	if (e) {
		fill_from(e, p);
		e->ret = errno_of(rc);
		bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	}
	finish(RT_MR_DEREG);
	return 0;
}

/* ---- QP create: ib_create_qp_user(dev, pd, init_attr, udata, uobj, caller) ---- */

SEC("kprobe")
int BPF_KPROBE(create_qp_entry, struct ib_device *dev, void *pd, struct ib_qp_init_attr *attr)
{
	struct rt_pending *p = start(RT_QP_CREATE);

	if (!p)
		return 0;
	read_dev_name(dev, p->dev);
	if (attr)
		p->qp_type = BPF_CORE_READ(attr, qp_type);
	p->to_state = IB_QPS_RESET;
	return 0;
}

SEC("kretprobe")
int BPF_KRETPROBE(create_qp_exit, long rc)
{
	struct rt_pending *p = current(RT_QP_CREATE);
	struct rt_event *e;

	if (!p)
		return 0;
	e = reserve(RT_QP_CREATE);
	if (e) {
		fill_from(e, p);
		if ((unsigned long)rc >= (unsigned long)-MAX_ERRNO) {
			e->ret = (__s32)rc;
			e->to_state = RT_NO_STATE;
		} else if (rc) {
			struct ib_qp *qp = (struct ib_qp *)rc;
			__u64 key = (__u64)rc;
			__u32 reset = IB_QPS_RESET;

			e->qp_num = BPF_CORE_READ(qp, qp_num);
			bpf_map_update_elem(&qp_states, &key, &reset, BPF_ANY);
		}
		bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	}
	finish(RT_QP_CREATE);
	return 0;
}

/* ---- QP modify: ib_modify_qp_with_udata(qp, attr, attr_mask, udata) ---- */

SEC("kprobe")
int BPF_KPROBE(modify_qp_entry, struct ib_qp *qp, struct ib_qp_attr *attr, int mask)
{
	struct rt_pending *p = start(RT_QP_MODIFY);

	if (!p || !qp)
		return 0;
	p->qp_ptr = (__u64)qp;
	p->qp_num = BPF_CORE_READ(qp, qp_num);
	p->attr_mask = (__u32)mask;
	p->driver_state = driver_qp_state(qp);
	read_dev_name(BPF_CORE_READ(qp, device), p->dev);
	if ((mask & IB_QP_STATE) && attr)
		p->to_state = BPF_CORE_READ(attr, qp_state);
	return 0;
}

SEC("kretprobe")
int BPF_KRETPROBE(modify_qp_exit, int rc)
{
	struct rt_pending *p = current(RT_QP_MODIFY);
	struct rt_event *e;
	__u64 key;
	__u32 *known;

	if (!p)
		return 0;
	key = p->qp_ptr;
	e = reserve(RT_QP_MODIFY);
	if (e) {
		fill_from(e, p);
		e->ret = errno_of(rc);
		if (p->driver_state != RT_NO_STATE) {
			e->from_state = p->driver_state;
			e->flags |= RT_FROM_DRIVER;
		} else {
			known = bpf_map_lookup_elem(&qp_states, &key);
			if (known)
				e->from_state = *known;
		}
		bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	}
	if (rc == 0 && p->to_state != RT_NO_STATE) {
		__u32 to = p->to_state;

		bpf_map_update_elem(&qp_states, &key, &to, BPF_ANY);
	}
	finish(RT_QP_MODIFY);
	return 0;
}

/* ---- QP destroy: ib_destroy_qp_user(qp, udata) ---- */

SEC("kprobe")
int BPF_KPROBE(destroy_qp_entry, struct ib_qp *qp)
{
	struct rt_pending *p = start(RT_QP_DESTROY);

	if (!p || !qp)
		return 0;
	p->qp_ptr = (__u64)qp;
	p->qp_num = BPF_CORE_READ(qp, qp_num);
	p->driver_state = driver_qp_state(qp);
	read_dev_name(BPF_CORE_READ(qp, device), p->dev);
	return 0;
}

SEC("kretprobe")
int BPF_KRETPROBE(destroy_qp_exit, int rc)
{
	struct rt_pending *p = current(RT_QP_DESTROY);
	struct rt_event *e;
	__u64 key;
	__u32 *known;

	if (!p)
		return 0;
	key = p->qp_ptr;
	e = reserve(RT_QP_DESTROY);
	if (e) {
		fill_from(e, p);
		e->ret = errno_of(rc);
		if (p->driver_state != RT_NO_STATE) {
			e->from_state = p->driver_state;
			e->flags |= RT_FROM_DRIVER;
		} else {
			known = bpf_map_lookup_elem(&qp_states, &key);
			if (known)
				e->from_state = *known;
		}
		bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	}
	if (rc == 0)
		bpf_map_delete_elem(&qp_states, &key);
	finish(RT_QP_DESTROY);
	return 0;
}

/* ---- async events ---- */

/* ib_uverbs_qp_event_handler(event, context): QP events of user-space QPs. */
SEC("kprobe")
int BPF_KPROBE(qp_event, struct ib_event *ev)
{
	struct rt_event *e = reserve(RT_ASYNC_QP);
	struct ib_qp *qp;

	if (!e)
		return 0;
	if (ev) {
		e->event_type = BPF_CORE_READ(ev, event);
		read_dev_name(BPF_CORE_READ(ev, device), e->dev);
		qp = BPF_CORE_READ(ev, element.qp);
		if (qp)
			e->qp_num = BPF_CORE_READ(qp, qp_num);
	}
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}

/* ib_uverbs_cq_event_handler(event, context): CQ errors (overrun). */
SEC("kprobe")
int BPF_KPROBE(cq_event, struct ib_event *ev)
{
	struct rt_event *e = reserve(RT_ASYNC_CQ);

	if (!e)
		return 0;
	if (ev) {
		e->event_type = BPF_CORE_READ(ev, event);
		read_dev_name(BPF_CORE_READ(ev, device), e->dev);
	}
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}

/* ib_dispatch_event(event): device and port events (PORT_ERR, PORT_ACTIVE, GID_CHANGE...). */
SEC("kprobe")
int BPF_KPROBE(device_event, struct ib_event *ev)
{
	struct rt_event *e = reserve(RT_ASYNC_DEVICE);

	if (!e)
		return 0;
	if (ev) {
		e->event_type = BPF_CORE_READ(ev, event);
		e->port = BPF_CORE_READ(ev, element.port_num);
		read_dev_name(BPF_CORE_READ(ev, device), e->dev);
	}
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}

/* ---- rdma_cma tracepoints: one program for all of them ----
 * The attach cookie says which tracepoint fired (bits 0-15: index in user space's table)
 * and, when the record has them, where its `event` (bits 16-31) and `status` (bits 32-47)
 * fields are, as user space read them from the tracepoint's format file (0 = absent).
 */
SEC("tracepoint")
int cma_tracepoint(void *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 event_off = (cookie >> 16) & 0xffff;
	__u32 status_off = (cookie >> 32) & 0xffff;
	struct rt_event *e = reserve(RT_CMA);

	if (!e)
		return 0;
	e->cookie = cookie & 0xffff;
	if (event_off) {
		__u64 ev = 0;

		bpf_probe_read_kernel(&ev, sizeof(ev), (char *)ctx + event_off);
		e->event_type = (__u32)ev;
	} else {
		e->event_type = 0xffffffff;
	}
	if (status_off) {
		__s32 st = 0;

		bpf_probe_read_kernel(&st, sizeof(st), (char *)ctx + status_off);
		e->ret = st;
	}
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}
