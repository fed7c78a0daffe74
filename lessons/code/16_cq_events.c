/*
 * 16_cq_events.c - chapter 16: completion events without missing one.
 *
 * Two loopback RC QPs on one device: A sends, B receives. B's CQ reports to a
 * completion channel; the channel's fd and the device's async_fd sit in one epoll set.
 *
 *   1. The missed event, on purpose. B's CQ is polled empty, THEN a completion arrives
 *      (A's SEND, waited for on A's CQ), THEN the CQ is re-armed: arming asks for an event
 *      at the NEXT completion, so the one already waiting raises none, and epoll_wait()
 *      stays silent although a completion sits in the CQ. A program that sleeps here
 *      never wakes up. One more poll after the re-arm finds it.
 *   2. The loop that cannot miss: epoll_wait(); ibv_get_cq_event() until EAGAIN;
 *      re-arm; poll until empty. Events are acknowledged in batches (ibv_ack_cq_events
 *      takes a mutex) and the rest before the CQ is destroyed, which waits for them.
 *      A sender thread posts N SENDs while the loop runs; the loop must see all N.
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -pthread -o 16_cq_events 16_cq_events.c -libverbs
 * Run:   ./16_cq_events [device] [-n messages]
 */
#include <fcntl.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <unistd.h>
#include "lab_common.h"

#define MSG 64
#define ACK_BATCH 16 /* acknowledge CQ events 16 at a time */
#define SQ_DEPTH 16
#define MAX_N 4096

struct events {
	struct loop l; /* qp[0] = A -> cq[0] (polled), qp[1] = B -> cq[1] (events) */
	struct ibv_comp_channel *chan;
	struct ibv_mr *mr;
	char *buf; /* SQ_DEPTH send slots, then N receive slots */
	int ep;
	int n;
	unsigned unacked, got_events, acks, empty_wakeups, async_events;
};

enum { TAG_COMP = 1, TAG_ASYNC = 2 };

static char *rslot(struct events *e, int i)
{
	return e->buf + (size_t)(SQ_DEPTH + i) * MSG;
}

/* epoll_wait for up to timeout_ms: the tags that fired (bit mask), 0 on timeout. */
static int wait_events(struct events *e, int timeout_ms)
{
	struct epoll_event ev[2];
	int i, n, tags = 0;

	do
		n = epoll_wait(e->ep, ev, 2, timeout_ms);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		FAIL("epoll_wait: %s", strerror(errno));
		return -1;
	}
	for (i = 0; i < n; i++)
		tags |= (int)ev[i].data.u32;
	return tags;
}

/* Take every pending event off the channel (it is non-blocking); ack in batches. */
static int take_cq_events(struct events *e)
{
	struct ibv_cq *cq;
	void *ctx;

	while (ibv_get_cq_event(e->chan, &cq, &ctx) == 0) {
		e->got_events++;
		if (++e->unacked >= ACK_BATCH) {
			ibv_ack_cq_events(cq, e->unacked);
			e->acks++;
			e->unacked = 0;
		}
	}
	if (errno != EAGAIN) {
		FAIL("ibv_get_cq_event: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* The async fd: print and acknowledge every event (an unacked one blocks destroy). */
static void take_async_events(struct events *e)
{
	struct ibv_async_event ae;

	while (ibv_get_async_event(e->l.ctx, &ae) == 0) {
		printf("async event: %s\n", ibv_event_type_str(ae.event_type));
		e->async_events++;
		ibv_ack_async_event(&ae);
	}
}

/* Poll B's CQ until empty; returns the number of successful receives, or -1. */
static int drain(struct events *e)
{
	struct ibv_wc wc[8];
	int i, n, got = 0;

	while ((n = ibv_poll_cq(e->l.cq[1], 8, wc)) > 0) {
		for (i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				FAIL("receive %llu: %s", (unsigned long long)wc[i].wr_id,
				     wc_status_name(wc[i].status));
				return -1;
			}
			got++;
		}
	}
	return n < 0 ? -1 : got;
}

/* A SENDs one message and waits for its own completion on A's CQ (busy poll). On rxe
 * the receiver writes its completion before it sends the ACK, so when A's SEND has
 * completed, B's receive completion is already in B's CQ. */
static int send_and_wait(struct events *e, int i)
{
	struct ibv_wc wc;
	char *slot = e->buf + (size_t)(i % SQ_DEPTH) * MSG;

	snprintf(slot, MSG, "message %d", i);
	if (post_one(e->l.qp[0], IBV_WR_SEND, e->mr, slot, MSG, 0, 0, (uint64_t)i))
		return -1;
	if (poll_wc(e->l.cq[0], &wc, 5000) != 1 || wc.status != IBV_WC_SUCCESS) {
		FAIL("SEND %d did not complete", i);
		return -1;
	}
	return 0;
}

static int missed_event(struct events *e)
{
	int tags, got;

	printf("1. the missed event\n");
	if (ibv_req_notify_cq(e->l.cq[1], 0) || send_and_wait(e, 0))
		return -1;
	tags = wait_events(e, 5000);
	if (tags < 0 || !(tags & TAG_COMP) || take_cq_events(e)) {
		FAIL("no event for the first completion");
		return -1;
	}
	got = drain(e);
	printf("   event for message 0; polled until empty: %d completion\n", got);
	/* The wrong order: a completion lands after the empty poll, before the re-arm. */
	if (got != 1 || send_and_wait(e, 1) || ibv_req_notify_cq(e->l.cq[1], 0))
		return -1;
	printf("   message 1 arrived after the empty poll; the CQ is re-armed after it\n");
	tags = wait_events(e, 2000);
	if (tags < 0)
		return -1;
	if (tags & TAG_COMP) {
		FAIL("an event came for a completion that was there before the arm");
		return -1;
	}
	printf("   epoll_wait: no event in 2 s, with a completion waiting in the CQ\n");
	got = drain(e);
	printf("   the poll after the re-arm finds it: %d completion\n", got);
	return got == 1 ? 0 : -1;
}

static void *sender(void *arg)
{
	struct events *e = arg;
	struct ibv_wc wc[SQ_DEPTH];
	int i, n, inflight = 0, done = 0;
	long rc = 0;

	for (i = 0; i < e->n || done < e->n;) {
		if (i < e->n && inflight < SQ_DEPTH) {
			char *slot = e->buf + (size_t)(i % SQ_DEPTH) * MSG;

			snprintf(slot, MSG, "message %d", 2 + i);
			if (post_one(e->l.qp[0], IBV_WR_SEND, e->mr, slot, MSG, 0, 0,
				     (uint64_t)(2 + i))) {
				rc = -1;
				break;
			}
			i++;
			inflight++;
			continue;
		}
		n = ibv_poll_cq(e->l.cq[0], SQ_DEPTH, wc);
		for (int k = 0; k < n; k++)
			if (wc[k].status != IBV_WC_SUCCESS)
				n = -1;
		if (n < 0) {
			FAIL("sender: a SEND failed");
			rc = -1;
			break;
		}
		inflight -= n;
		done += n;
	}
	return (void *)rc;
}

static int event_loop(struct events *e)
{
	pthread_t t;
	void *trc = NULL;
	int got = 0, r;
	unsigned events_before = e->got_events;
	double deadline = now_us() + 60e6;

	printf("2. the event loop: %d SENDs from a thread, events acknowledged %d at a time\n",
	       e->n, ACK_BATCH);
	if (ibv_req_notify_cq(e->l.cq[1], 0))
		return -1;
	if (pthread_create(&t, NULL, sender, e)) {
		FAIL("pthread_create");
		return -1;
	}
	while (got < e->n && now_us() < deadline) {
		int tags = wait_events(e, 5000);

		if (tags < 0)
			break;
		if (tags & TAG_ASYNC)
			take_async_events(e);
		if (!(tags & TAG_COMP))
			continue;
		/* get (all pending) -> re-arm -> poll until empty. */
		if (take_cq_events(e) || ibv_req_notify_cq(e->l.cq[1], 0))
			break;
		r = drain(e);
		if (r < 0)
			break;
		if (r == 0)
			e->empty_wakeups++;
		got += r;
	}
	pthread_join(t, &trc);
	printf("   %d of %d receives seen in %u events; %u acknowledgement calls so far, %u "
	       "events not yet acknowledged\n",
	       got, e->n, e->got_events - events_before, e->acks, e->unacked);
	printf("   wake-ups that found the CQ empty (its completion taken by an earlier "
	       "poll): %u\n",
	       e->empty_wakeups);
	return got == e->n && trc == NULL ? 0 : -1;
}

static int add_fd(int ep, int fd, uint32_t tag)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = tag };

	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) ||
	    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev)) {
		FAIL("fcntl/epoll_ctl: %s", strerror(errno));
		return -1;
	}
	return 0;
}

static int setup(struct events *e, const char *dev)
{
	struct ibv_qp_init_attr init;
	size_t len = (size_t)(SQ_DEPTH + e->n + 2) * MSG;
	int i;

	e->l.port = 1;
	e->l.retry_cnt = 7; /* what loop_open() sets; qp_connect() uses it */
	e->l.ctx = open_device(dev);
	if (!e->l.ctx)
		return -1;
	if (ibv_query_port(e->l.ctx, 1, &e->l.pa) || e->l.pa.state != IBV_PORT_ACTIVE ||
	    pick_gid(e->l.ctx, 1, lab_netdev(), &e->l.gid_index, &e->l.gid))
		return -1;
	e->ep = epoll_create1(EPOLL_CLOEXEC);
	e->chan = ibv_create_comp_channel(e->l.ctx);
	e->l.pd = ibv_alloc_pd(e->l.ctx);
	e->buf = calloc(1, len);
	if (e->ep < 0 || !e->chan || !e->l.pd || !e->buf) {
		FAIL("epoll, channel, PD or memory: %s", strerror(errno));
		return -1;
	}
	if (add_fd(e->ep, e->chan->fd, TAG_COMP) || add_fd(e->ep, e->l.ctx->async_fd, TAG_ASYNC))
		return -1;
	e->mr = ibv_reg_mr(e->l.pd, e->buf, len, IBV_ACCESS_LOCAL_WRITE);
	e->l.cq[0] = ibv_create_cq(e->l.ctx, SQ_DEPTH, NULL, NULL, 0);
	/* B's CQ: every receive can be in it at once; events go to the channel. */
	e->l.cq[1] = ibv_create_cq(e->l.ctx, e->n + 2, e, e->chan, 0);
	if (!e->mr || !e->l.cq[0] || !e->l.cq[1]) {
		FAIL("MR or CQ: %s", strerror(errno));
		return -1;
	}
	for (i = 0; i < 2; i++) {
		memset(&init, 0, sizeof(init));
		init.send_cq = e->l.cq[i];
		init.recv_cq = e->l.cq[i];
		init.qp_type = IBV_QPT_RC;
		init.sq_sig_all = 1;
		init.cap.max_send_wr = SQ_DEPTH;
		init.cap.max_recv_wr = (uint32_t)e->n + 2;
		init.cap.max_send_sge = 1;
		init.cap.max_recv_sge = 1;
		e->l.qp[i] = ibv_create_qp(e->l.pd, &init);
		if (!e->l.qp[i]) {
			FAIL("ibv_create_qp: %s", strerror(errno));
			return -1;
		}
	}
	if (loop_connect(&e->l, 0, 0, LAB_RNR_RETRY))
		return -1;
	for (i = 0; i < e->n + 2; i++)
		if (post_recv_one(e->l.qp[1], e->mr, rslot(e, i), MSG, (uint64_t)i))
			return -1;
	printf("device %s: B's CQ (%d entries) reports to a completion channel; epoll watches "
	       "it and the async fd\n",
	       ibv_get_device_name(e->l.ctx->device), e->l.cq[1]->cqe);
	return 0;
}

/* Acknowledge what is left, then free children before parents. */
static int teardown(struct events *e)
{
	int ret = 0;

	if (e->unacked) {
		/* ibv_destroy_cq() waits until every event got is acknowledged. */
		ibv_ack_cq_events(e->l.cq[1], e->unacked);
		e->acks++;
		e->unacked = 0;
	}
	if (e->l.ctx)
		take_async_events(e);
	if (e->mr && ibv_dereg_mr(e->mr))
		ret = -1;
	/* QPs, CQs, the channel (no CQ uses it any more), PD, and the context last. */
	for (int i = 0; i < 2; i++)
		if (e->l.qp[i] && ibv_destroy_qp(e->l.qp[i]))
			ret = -1;
	for (int i = 0; i < 2; i++)
		if (e->l.cq[i] && ibv_destroy_cq(e->l.cq[i]))
			ret = -1;
	if (e->chan && ibv_destroy_comp_channel(e->chan))
		ret = -1;
	if (e->l.pd && ibv_dealloc_pd(e->l.pd))
		ret = -1;
	if (e->l.ctx && ibv_close_device(e->l.ctx))
		ret = -1;
	if (e->ep >= 0)
		close(e->ep);
	free(e->buf);
	return ret;
}

int main(int argc, char **argv)
{
	static struct events e;
	const char *dev = NULL;
	unsigned events, acks;
	int opt, ret = 1;

	e.n = 2000;
	e.ep = -1;
	while ((opt = getopt(argc, argv, "n:")) != -1) {
		if (opt != 'n') {
			fprintf(stderr, "usage: %s [device] [-n messages]\n", argv[0]);
			return 2;
		}
		e.n = atoi(optarg);
	}
	if (optind < argc)
		dev = argv[optind];
	if (e.n < 1 || e.n > MAX_N) {
		FAIL("-n 1..%d", MAX_N);
		return 2;
	}
	if (setup(&e, dev) == 0 && missed_event(&e) == 0 && event_loop(&e) == 0)
		ret = 0;
	events = e.got_events;
	acks = e.acks + (e.unacked ? 1 : 0);
	if (teardown(&e))
		ret = 1;
	printf("events got %u, acknowledged in %u calls, async events %u\n", events, acks,
	       e.async_events);
	if (ret == 0)
		printf("OK\n");
	return ret;
}
