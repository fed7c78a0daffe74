/*
 * 05_cm_event_loop.c - chapter 5: an rdma_cm server for many clients, and its client,
 * each driven by ONE event loop, between two machines.
 *
 *   server: ./05_cm_event_loop server [-p port] [-n clients] [-c max_open] [-g] [-1]
 *   client: ./05_cm_event_loop client [-p port] [-v version] [-t timeout_ms]
 *                                     [-r messages] [-d delay_ms] [-s addr:rkey] SERVER
 *
 * The client says hello in the CONNECT REQUEST's private data (a protocol version and a
 * name). The server refuses a version it does not speak, or a client beyond `max_open`
 * open connections, with rdma_reject() and a reason in the reject's private data; it
 * accepts the others with private data that carry where the client may write: the
 * address, length and rkey of a buffer registered in a protection domain of that
 * connection alone (its own PD, CQ and QP: the rkey is useless on any other client's
 * connection). The client RDMA-WRITEs a line there, then SENDs a short "more" or "done";
 * RC delivers in order, so when the server sees the SEND the WRITE is in its buffer.
 * `-r` repeats that, `-d` waits between messages (a client to kill mid-transfer).
 *
 * Section 5.5 plays thief, on purpose: the server's `-g` prints each grant (a real server
 * never prints a capability), and a client's `-s addr:rkey` WRITEs with that grant,
 * taken from another client, instead of its own. Its connection is in another PD, so
 * the server's device refuses the WRITE: the client prints the completion's status.
 * The server's `-1` makes the mistake the PDs prevent: one PD for every client.
 *
 * Both sides print the remote access the connection granted to their QP (ibv_query_qp):
 * rdma_cm grants REMOTE_WRITE on every RC QP it connects, whatever the program asked.
 *
 * The server's loop waits in epoll_wait() on three fds: the CM event channel, one
 * completion channel for every connection's CQ, and the device's async event fd. When a
 * client disconnects (or dies: its kernel sends the DREQ), the server moves that QP to
 * ERR, polls the CQ until every receive it posted has come back (flushed), and only then
 * frees the connection; it exits after `clients` connections have ended.
 *
 * Every event the CM can deliver is handled: the ones that end a connection attempt
 * (ADDR_ERROR, ROUTE_ERROR, REJECTED, UNREACHABLE, CONNECT_ERROR) print their status;
 * the client's exit code says which happened:
 *   0 served, 1 a local error, 2 address or route not resolved, 3 rejected,
 *   4 unreachable or connection error.
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -o 05_cm_event_loop 05_cm_event_loop.c -libverbs -lrdmacm
 */
#include <endian.h>
#include <netdb.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include "lab_common.h"

#define PROTO_VERSION 1
#define WBUF 128 /* what a client may write into */

/* The private data, in network byte order (the peer may be another CPU). */
struct hello {		  /* client -> server, in the CONNECT REQUEST (at most 56 bytes) */
	uint32_t version;
	char name[32];
};
struct grant {		  /* server -> client, in the accept (REP) */
	uint64_t addr;
	uint32_t rkey;
	uint32_t len;
};
struct refusal {	  /* server -> client, in the reject (REJ) */
	char reason[48];
};

/* The IB CM reject reasons a client of this program can meet (IBTA table 112). */
static const char *reject_reason(int status)
{
	switch (status) {
	case 8: return "invalid service ID: nobody listens on that port";
	case 28: return "consumer defined: the server refused us";
	default: return "see the IB CM reject reasons";
	}
}

static void print_event(const char *who, const struct rdma_cm_event *ev)
{
	printf("%s: event %s (status %d)\n", who, rdma_event_str(ev->event), ev->status);
}

/* A page-aligned, zeroed buffer: registered memory shares no page with other data. */
static void *alloc_buf(size_t len)
{
	void *p = NULL;

	if (posix_memalign(&p, (size_t)sysconf(_SC_PAGESIZE), len))
		return NULL;
	memset(p, 0, len);
	return p;
}

/* What remote peers may do through this QP: set by whoever moved it to INIT. */
static int print_qp_access(const char *who, struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	if (ibv_query_qp(qp, &a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS, &ia)) {
		FAIL("%s: ibv_query_qp: %s", who, strerror(errno));
		return -1;
	}
	printf("%s: QP 0x%06x (%s) grants the peer:%s%s%s%s\n", who, qp->qp_num,
	       qp_state_name(a.qp_state),
	       a.qp_access_flags & IBV_ACCESS_REMOTE_WRITE ? " REMOTE_WRITE" : "",
	       a.qp_access_flags & IBV_ACCESS_REMOTE_READ ? " REMOTE_READ" : "",
	       a.qp_access_flags & IBV_ACCESS_REMOTE_ATOMIC ? " REMOTE_ATOMIC" : "",
	       a.qp_access_flags &
			       (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				IBV_ACCESS_REMOTE_ATOMIC) ?
		       "" :
		       " nothing");
	return 0;
}

/* ------------------------------------------------------------------------------ server */

#define RECV_DEPTH 4 /* receives kept posted per connection; its CQ holds exactly these */
#define MAX_OPEN 16  /* default cap on open connections (-c) */

enum { TAG_CM, TAG_COMP, TAG_ASYNC }; /* what an epoll event is about */

struct conn {
	struct rdma_cm_id *id;
	struct ibv_pd *pd; /* this connection's own: its rkey works on this QP only */
	int pd_shared; /* -1: the server's one PD, not ours to free */
	struct ibv_cq *cq; /* this connection's own, RECV_DEPTH entries: it cannot overflow */
	struct ibv_mr *wmr, *rmr;
	char *wbuf; /* remote-writable, this connection only */
	char *rbuf; /* RECV_DEPTH slots of 16 bytes: the SENDs land here */
	int posted; /* receives posted and not yet completed */
	int flushed; /* of those, completed with IBV_WC_WR_FLUSH_ERR */
	int closing;
	unsigned long msgs;
	char name[33];
};

struct server {
	struct ibv_context *verbs; /* the device the requests come to */
	struct ibv_comp_channel *chan; /* one channel, every connection's CQ */
	int ep; /* epoll: CM channel, completion channel, async fd */
	int served, refused, open, max_open, errors;
	int show_grants; /* -g: print each grant, for section 5.5's thief */
	int one_pd; /* -1: one PD for every client, the mistake of section 5.5 */
	struct ibv_pd *shared_pd;
};

static int add_fd(int ep, int fd, uint32_t tag)
{
	struct epoll_event e = { .events = EPOLLIN, .data.u32 = tag };

	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e)) {
		FAIL("epoll/fcntl on fd %d: %s", fd, strerror(errno));
		return -1;
	}
	return 0;
}

/* Children before parents: QP, MRs, CQ, PD, then the id. */
static void conn_free(struct conn *c)
{
	if (c->id->qp)
		rdma_destroy_qp(c->id);
	if (c->wmr && ibv_dereg_mr(c->wmr))
		FAIL("ibv_dereg_mr");
	if (c->rmr && ibv_dereg_mr(c->rmr))
		FAIL("ibv_dereg_mr");
	if (c->cq && ibv_destroy_cq(c->cq))
		FAIL("ibv_destroy_cq");
	if (c->pd && !c->pd_shared && ibv_dealloc_pd(c->pd))
		FAIL("ibv_dealloc_pd");
	if (rdma_destroy_id(c->id))
		FAIL("rdma_destroy_id: %s", strerror(errno));
	free(c->wbuf);
	free(c->rbuf);
	free(c);
}

static int conn_post_recv(struct conn *c, uint64_t slot)
{
	if (post_recv_one(c->id->qp, c->rmr, c->rbuf + 16 * slot, 16, slot))
		return -1;
	c->posted++;
	return 0;
}

/* Take every completion of this connection's CQ. A receive means the client's WRITE has
 * landed; while the connection is open, the slot is posted again. */
static int conn_poll(struct conn *c)
{
	struct ibv_wc wc;
	int n;

	while ((n = ibv_poll_cq(c->cq, 1, &wc)) == 1) {
		c->posted--;
		if (wc.status != IBV_WC_SUCCESS) {
			/* Flushed receives after the QP went to ERR are expected; others not. */
			if (wc.status == IBV_WC_WR_FLUSH_ERR)
				c->flushed++;
			else
				printf("server: \"%s\": completion %s\n", c->name,
				       wc_status_name(wc.status));
			continue;
		}
		if (++c->msgs == 1) {
			c->wbuf[WBUF - 1] = 0;
			printf("server: \"%s\" wrote: \"%s\"\n", c->name, c->wbuf);
		}
		if (!c->closing && conn_post_recv(c, wc.wr_id))
			return -1;
	}
	if (n < 0) {
		FAIL("server: ibv_poll_cq: %d", n);
		return -1;
	}
	return 0;
}

/* The connection is over (DISCONNECTED, or an accepted connection that never became
 * ESTABLISHED): QP to ERR, every posted receive back as a completion, then free. Nothing
 * the device still owns (a posted buffer, a CQ entry) may outlive its memory. */
static int conn_close(struct server *sv, struct conn *c, const char *why)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };
	double deadline = now_us() + 5e6;
	int posted = c->posted, ret = 0;

	c->closing = 1;
	if (ibv_modify_qp(c->id->qp, &attr, IBV_QP_STATE)) {
		FAIL("server: QP 0x%06x to ERR: %s", c->id->qp->qp_num, strerror(errno));
		ret = -1;
	}
	/* The flush is asynchronous (on rxe a kernel task does it): poll, bounded. */
	while (!ret && c->posted > 0 && now_us() < deadline) {
		if (conn_poll(c))
			ret = -1;
		else if (c->posted > 0)
			nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
	}
	if (c->posted > 0) {
		FAIL("server: \"%s\": %d receives never flushed", c->name, c->posted);
		ret = -1;
	}
	printf("server: \"%s\" %s after %lu messages; %d posted receives back, %d flushed;"
	       " freeing it\n",
	       c->name, why, c->msgs, posted - c->posted, c->flushed);
	conn_free(c);
	sv->open--;
	if (ret)
		sv->errors++;
	return ret;
}

static int refuse(struct server *sv, struct rdma_cm_id *id, const char *fmt, unsigned v, int w)
{
	struct refusal no;

	memset(&no, 0, sizeof(no));
	snprintf(no.reason, sizeof(no.reason), fmt, v, w);
	printf("server: refusing a client: %s\n", no.reason);
	sv->refused++;
	if (rdma_reject(id, &no, sizeof(no)))
		FAIL("rdma_reject: %s", strerror(errno));
	/* A refused request's id is ours to destroy. */
	return rdma_destroy_id(id) ? -1 : 0;
}

/* The device's context exists once the first request arrives: its completion channel
 * and async fd join the epoll set then. */
static int server_attach_device(struct server *sv, struct ibv_context *verbs)
{
	sv->verbs = verbs;
	sv->chan = ibv_create_comp_channel(verbs);
	if (!sv->chan) {
		FAIL("server: ibv_create_comp_channel: %s", strerror(errno));
		return -1;
	}
	if (add_fd(sv->ep, sv->chan->fd, TAG_COMP) || add_fd(sv->ep, verbs->async_fd, TAG_ASYNC))
		return -1;
	if (sv->one_pd && !(sv->shared_pd = ibv_alloc_pd(verbs))) {
		FAIL("server: ibv_alloc_pd: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* A CONNECT_REQUEST: refuse it, or set up its QP and accept it. Returns -1 on error. */
static int on_connect_request(struct server *sv, struct rdma_cm_id *id, const void *pdata,
			      uint8_t plen)
{
	struct hello h;
	struct grant g;
	struct ibv_qp_init_attr init;
	struct rdma_conn_param param;
	struct conn *c;
	uint64_t slot;

	memset(&h, 0, sizeof(h));
	memcpy(&h, pdata, plen < sizeof(h) ? plen : sizeof(h));
	if (ntohl(h.version) != PROTO_VERSION)
		return refuse(sv, id, "protocol version %u, I speak %d", ntohl(h.version),
			      PROTO_VERSION);
	if (sv->open >= sv->max_open)
		return refuse(sv, id, "server full: %u of %d open", (unsigned)sv->open,
			      sv->max_open);
	if (!sv->verbs && server_attach_device(sv, id->verbs))
		return -1;
	if (id->verbs != sv->verbs) {
		FAIL("server: a request on another device");
		return -1;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -1;
	c->id = id;
	id->context = c;
	memcpy(c->name, h.name, sizeof(h.name));
	c->pd_shared = sv->shared_pd != NULL;
	c->pd = c->pd_shared ? sv->shared_pd : ibv_alloc_pd(id->verbs);
	c->cq = c->pd ? ibv_create_cq(id->verbs, RECV_DEPTH, c, sv->chan, 0) : NULL;
	c->wbuf = alloc_buf(WBUF);
	c->rbuf = alloc_buf(16 * RECV_DEPTH);
	c->wmr = c->cq && c->wbuf && c->rbuf ?
			 ibv_reg_mr(c->pd, c->wbuf, WBUF,
				    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) :
			 NULL;
	c->rmr = c->wmr ? ibv_reg_mr(c->pd, c->rbuf, 16 * RECV_DEPTH, IBV_ACCESS_LOCAL_WRITE) :
			  NULL;
	memset(&init, 0, sizeof(init));
	init.send_cq = c->cq;
	init.recv_cq = c->cq;
	init.qp_type = IBV_QPT_RC;
	init.sq_sig_all = 1;
	init.cap.max_send_wr = 1; /* the server sends nothing */
	init.cap.max_recv_wr = RECV_DEPTH;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	if (!c->rmr || rdma_create_qp(id, c->pd, &init) || ibv_req_notify_cq(c->cq, 0)) {
		FAIL("server: PD/CQ/MRs/QP: %s", strerror(errno));
		conn_free(c);
		return -1;
	}
	for (slot = 0; slot < RECV_DEPTH; slot++) { /* before accepting: no RNR */
		if (conn_post_recv(c, slot)) {
			conn_free(c);
			return -1;
		}
	}
	g.addr = htobe64((uintptr_t)c->wbuf);
	g.rkey = htonl(c->wmr->rkey);
	g.len = htonl(WBUF);
	memset(&param, 0, sizeof(param));
	param.private_data = &g;
	param.private_data_len = sizeof(g);
	param.rnr_retry_count = LAB_RNR_RETRY;
	/* responder_resources stays 0: no RDMA READ or atomics from this client. */
	if (rdma_accept(id, &param)) {
		FAIL("server: rdma_accept: %s", strerror(errno));
		conn_free(c);
		return -1;
	}
	sv->open++;
	printf("server: accepted client \"%s\" on QP 0x%06x (%d open)\n", c->name,
	       id->qp->qp_num, sv->open);
	if (sv->show_grants)
		printf("server: grant to \"%s\": addr 0x%llx, rkey 0x%x, %d bytes\n", c->name,
		       (unsigned long long)(uintptr_t)c->wbuf, c->wmr->rkey, WBUF);
	return print_qp_access("server", id->qp);
}

/* The completion channel is readable: which CQs have news. Re-arm BEFORE polling: a
 * completion that lands between the poll and a later re-arm would raise no event. */
static int on_comp_channel(struct server *sv)
{
	struct ibv_cq *cq;
	void *ctx;

	while (ibv_get_cq_event(sv->chan, &cq, &ctx) == 0) {
		struct conn *c = ctx;

		ibv_ack_cq_events(cq, 1); /* ibv_destroy_cq waits for every event's ack */
		if (ibv_req_notify_cq(cq, 0) || conn_poll(c))
			return -1;
	}
	return errno == EAGAIN ? 0 : -1;
}

/* The device's asynchronous events: QP and CQ errors, port changes. Read and ack all. */
static int on_async(struct server *sv)
{
	struct ibv_async_event ae;

	while (ibv_get_async_event(sv->verbs, &ae) == 0) {
		switch (ae.event_type) {
		case IBV_EVENT_QP_FATAL:
		case IBV_EVENT_QP_REQ_ERR:
		case IBV_EVENT_QP_ACCESS_ERR:
		case IBV_EVENT_COMM_EST:
		case IBV_EVENT_SQ_DRAINED:
		case IBV_EVENT_PATH_MIG:
		case IBV_EVENT_PATH_MIG_ERR:
		case IBV_EVENT_QP_LAST_WQE_REACHED:
			printf("server: async event %s on QP 0x%06x\n",
			       ibv_event_type_str(ae.event_type), ae.element.qp->qp_num);
			break;
		default:
			printf("server: async event %s\n", ibv_event_type_str(ae.event_type));
		}
		ibv_ack_async_event(&ae);
		if (ae.event_type == IBV_EVENT_DEVICE_FATAL)
			return -1;
	}
	return errno == EAGAIN ? 0 : -1;
}

static int on_cm_event(struct server *sv, struct rdma_event_channel *ch)
{
	struct rdma_cm_event *ev;
	struct rdma_cm_event copy;
	uint8_t pdata[64];
	uint8_t plen;

	if (rdma_get_cm_event(ch, &ev))
		return errno == EAGAIN ? 0 : -1;
	/* Copy what we need and acknowledge at once: rdma_destroy_id() of an id
	 * waits until all of its events are acknowledged. */
	copy = *ev;
	plen = ev->param.conn.private_data_len < sizeof(pdata) ? ev->param.conn.private_data_len :
								  sizeof(pdata);
	if (plen)
		memcpy(pdata, ev->param.conn.private_data, plen);
	print_event("server", ev);
	rdma_ack_cm_event(ev);

	switch (copy.event) {
	case RDMA_CM_EVENT_CONNECT_REQUEST:
		/* A NEW id for this connection; the listener stays as it is. */
		return on_connect_request(sv, copy.id, pdata, plen);
	case RDMA_CM_EVENT_ESTABLISHED:
		printf("server: \"%s\" is connected\n", ((struct conn *)copy.id->context)->name);
		return 0;
	case RDMA_CM_EVENT_DISCONNECTED:
		/* The client is done, or gone. Answer its DREQ, then tear down in order. */
		rdma_disconnect(copy.id);
		sv->served++;
		conn_close(sv, copy.id->context, "disconnected");
		return 0;
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_REJECTED:
		/* An accepted connection that never became ESTABLISHED. */
		conn_close(sv, copy.id->context, "failed to connect");
		return 0;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		FAIL("server: the device went away");
		return -1;
	case RDMA_CM_EVENT_TIMEWAIT_EXIT:
	default:
		return 0;
	}
}

static int run_server(const char *port, int clients, int max_open, int show_grants, int one_pd)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listener = NULL;
	struct sockaddr_in addr;
	struct server sv;
	int ret = 1;

	memset(&sv, 0, sizeof(sv));
	sv.max_open = max_open;
	sv.show_grants = show_grants;
	sv.one_pd = one_pd;
	sv.ep = epoll_create1(EPOLL_CLOEXEC);
	memset(&addr, 0, sizeof(addr));
	addr.sin_family = AF_INET; /* INADDR_ANY: every RDMA device's address */
	addr.sin_port = htons((uint16_t)atoi(port));
	if (!ch || sv.ep < 0 || add_fd(sv.ep, ch->fd, TAG_CM) ||
	    rdma_create_id(ch, &listener, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(listener, (struct sockaddr *)&addr) || rdma_listen(listener, 8)) {
		FAIL("server: listen on port %s: %s", port, strerror(errno));
		goto out;
	}
	printf("server: listening on port %s for %d clients, at most %d at once%s\n", port,
	       clients, max_open, one_pd ? "; ONE PD for all of them" : "");
	while (sv.served < clients) {
		struct epoll_event evs[3];
		int i, n = epoll_wait(sv.ep, evs, 3, -1); /* no timeout: woken by events only */

		if (n < 0 && errno != EINTR) {
			FAIL("epoll_wait: %s", strerror(errno));
			goto out;
		}
		for (i = 0; i < n; i++) {
			int r = evs[i].data.u32 == TAG_CM   ? on_cm_event(&sv, ch) :
				evs[i].data.u32 == TAG_COMP ? on_comp_channel(&sv) :
							      on_async(&sv);
			if (r) {
				FAIL("server: event loop: %s", strerror(errno));
				goto out;
			}
		}
	}
	printf("server: served %d clients, refused %d\n", sv.served, sv.refused);
	ret = sv.errors ? 1 : 0;
out:
	if (sv.open)
		FAIL("server: %d connections still open", sv.open);
	if (listener && rdma_destroy_id(listener))
		ret = 1;
	if (sv.shared_pd && ibv_dealloc_pd(sv.shared_pd))
		ret = 1;
	if (sv.chan && ibv_destroy_comp_channel(sv.chan))
		ret = 1;
	if (sv.ep >= 0)
		close(sv.ep);
	if (ch)
		rdma_destroy_event_channel(ch);
	if (ret == 0)
		printf("OK\n");
	return ret;
}

/* ------------------------------------------------------------------------------ client */

struct client {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	char *buf; /* local only: what we write and send (heap, never the stack) */
};

static int client_setup(struct rdma_cm_id *id, struct client *c)
{
	struct ibv_qp_init_attr init;

	c->pd = ibv_alloc_pd(id->verbs);
	c->cq = c->pd ? ibv_create_cq(id->verbs, 8, NULL, NULL, 0) : NULL;
	c->buf = c->cq ? alloc_buf(WBUF) : NULL;
	c->mr = c->buf ? ibv_reg_mr(c->pd, c->buf, WBUF, 0) : NULL;
	memset(&init, 0, sizeof(init));
	init.send_cq = c->cq;
	init.recv_cq = c->cq;
	init.qp_type = IBV_QPT_RC;
	init.sq_sig_all = 1;
	init.cap.max_send_wr = 4;
	init.cap.max_recv_wr = 1;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	if (!c->mr || rdma_create_qp(id, c->pd, &init)) {
		FAIL("client: PD/CQ/MR/QP: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* ESTABLISHED: `msgs` times, WRITE a line into the server's buffer, then SEND "more" (or
 * "done" the last time); wait for both completions, then `delay_ms`. With `stolen` (the
 * thief of section 5.5), the WRITEs go to that address and rkey instead of the grant's. */
static int client_work(struct rdma_cm_id *id, struct client *c, const char *name,
		       const void *pdata, uint8_t plen, int msgs, int delay_ms,
		       const struct grant *stolen)
{
	struct grant g;
	struct ibv_wc wc;
	int i, m;

	if (plen < sizeof(g)) {
		FAIL("client: the accept carried %u bytes of private data, not a grant", plen);
		return -1;
	}
	memcpy(&g, pdata, sizeof(g));
	/* The rkey is a capability: use it, never print it. */
	printf("client: the server grants %u bytes to write\n", ntohl(g.len));
	if (print_qp_access("client", id->qp))
		return -1;
	if (stolen) {
		g.addr = stolen->addr;
		g.rkey = stolen->rkey;
		printf("client: writing with a grant taken from another connection instead\n");
	}
	for (m = 1; m <= msgs; m++) {
		char *line = c->buf + 8;

		snprintf(line, WBUF - 8, "hello from %s, QP 0x%06x, message %d", name,
			 id->qp->qp_num, m);
		if (strlen(line) + 1 > ntohl(g.len)) {
			FAIL("client: the grant is too small");
			return -1;
		}
		memcpy(c->buf, m == msgs ? "done" : "more", 5);
		if (post_one(id->qp, IBV_WR_RDMA_WRITE, c->mr, line, (uint32_t)strlen(line) + 1,
			     be64toh(g.addr), ntohl(g.rkey), 1) ||
		    post_one(id->qp, IBV_WR_SEND, c->mr, c->buf, 5, 0, 0, 2))
			return -1;
		for (i = 0; i < 2; i++) {
			if (poll_wc(c->cq, &wc, 30000) != 1) {
				FAIL("client: message %d: no completion", m);
				return -1;
			}
			if (wc.status != IBV_WC_SUCCESS) {
				/* The WRITE (wr_id 1) fails first; the SEND after it is flushed. */
				printf("client: message %d: %s completed with %s\n", m,
				       wc.wr_id == 1 ? "WRITE" : "SEND", wc_status_name(wc.status));
				return -1;
			}
		}
		if (m == 1)
			printf("client: WRITE and SEND completed\n");
		if (delay_ms && m < msgs)
			nanosleep(&(struct timespec){ .tv_sec = delay_ms / 1000,
						      .tv_nsec = (delay_ms % 1000) * 1000000L },
				  NULL);
	}
	printf("client: %d messages written\n", msgs);
	return 0;
}

/* The device's async events, read while the client waits for CM events. */
static void client_async(struct ibv_context *verbs)
{
	struct ibv_async_event ae;

	while (ibv_get_async_event(verbs, &ae) == 0) {
		printf("client: async event %s\n", ibv_event_type_str(ae.event_type));
		ibv_ack_async_event(&ae);
	}
}

static int run_client(const char *server, const char *port, uint32_t version, int timeout_ms,
		      int msgs, int delay_ms, const struct grant *stolen)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res;
	struct client c;
	struct hello h;
	struct rdma_conn_param param;
	char name[32];
	int ret = -1;

	memset(&c, 0, sizeof(c));
	if (getaddrinfo(server, port, &hints, &res)) {
		FAIL("client: cannot resolve %s", server);
		ret = 2;
		goto out;
	}
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(id, NULL, res->ai_addr, timeout_ms)) {
		FAIL("client: %s", strerror(errno));
		freeaddrinfo(res);
		ret = 1;
		goto out;
	}
	freeaddrinfo(res);
	gethostname(name, sizeof(name) - 8);
	name[sizeof(name) - 8] = 0;
	snprintf(name + strlen(name), 8, "/%d", (int)getpid() % 100000);

	while (ret < 0) {
		struct rdma_cm_event *ev;
		struct rdma_cm_event copy;
		uint8_t pdata[64];
		uint8_t plen;
		/* The CM channel, and once the device is known its async fd (non-blocking). */
		struct pollfd p[2] = { { .fd = ch->fd, .events = POLLIN },
				       { .fd = id->verbs ? id->verbs->async_fd : -1,
					 .events = POLLIN } };

		if (poll(p, 2, -1) < 0 && errno != EINTR) {
			FAIL("client: poll: %s", strerror(errno));
			ret = 1;
			break;
		}
		if (p[1].revents & POLLIN)
			client_async(id->verbs);
		if (!(p[0].revents & POLLIN))
			continue;
		if (rdma_get_cm_event(ch, &ev)) {
			FAIL("client: rdma_get_cm_event: %s", strerror(errno));
			ret = 1;
			break;
		}
		copy = *ev;
		plen = ev->param.conn.private_data_len < sizeof(pdata) ?
			       ev->param.conn.private_data_len :
			       sizeof(pdata);
		if (plen)
			memcpy(pdata, ev->param.conn.private_data, plen);
		print_event("client", ev);
		rdma_ack_cm_event(ev);

		switch (copy.event) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
			/* Device, port and source GID found: now the path. */
			if (fcntl(id->verbs->async_fd, F_SETFL,
				  fcntl(id->verbs->async_fd, F_GETFL) | O_NONBLOCK) ||
			    rdma_resolve_route(id, timeout_ms))
				ret = 2;
			break;
		case RDMA_CM_EVENT_ROUTE_RESOLVED:
			if (client_setup(id, &c)) {
				ret = 1;
				break;
			}
			memset(&h, 0, sizeof(h));
			h.version = htonl(version);
			snprintf(h.name, sizeof(h.name), "%s", name);
			memset(&param, 0, sizeof(param));
			param.private_data = &h;
			param.private_data_len = sizeof(h);
			param.retry_count = 7;
			param.rnr_retry_count = LAB_RNR_RETRY;
			printf("client: connecting as \"%s\", protocol version %u\n", name, version);
			if (rdma_connect(id, &param))
				ret = 1;
			break;
		case RDMA_CM_EVENT_ESTABLISHED:
			if (client_work(id, &c, name, pdata, plen, msgs, delay_ms, stolen)) {
				/* Failed: still say goodbye, so that the server frees us now. */
				rdma_disconnect(id);
				ret = 1;
			} else if (rdma_disconnect(id)) {
				ret = 1;
			}
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
			ret = 0;
			break;
		case RDMA_CM_EVENT_ADDR_ERROR:
		case RDMA_CM_EVENT_ROUTE_ERROR:
			printf("client: %s not resolved: %s\n",
			       copy.event == RDMA_CM_EVENT_ADDR_ERROR ? "address" : "route",
			       strerror(-copy.status));
			ret = 2;
			break;
		case RDMA_CM_EVENT_REJECTED:
			printf("client: rejected, reason %d (%s)\n", copy.status,
			       reject_reason(copy.status));
			if (copy.status == 28 && plen >= sizeof(struct refusal)) {
				pdata[sizeof(struct refusal) - 1] = 0;
				printf("client: the server says: %s\n", (char *)pdata);
			}
			ret = 3;
			break;
		case RDMA_CM_EVENT_UNREACHABLE:
		case RDMA_CM_EVENT_CONNECT_ERROR:
			printf("client: no connection: status %d\n", copy.status);
			ret = 4;
			break;
		default:
			break; /* e.g. TIMEWAIT_EXIT */
		}
	}
out:
	if (id && id->qp)
		rdma_destroy_qp(id);
	if (c.mr && ibv_dereg_mr(c.mr))
		ret = 1;
	if (c.cq && ibv_destroy_cq(c.cq))
		ret = 1;
	if (c.pd && ibv_dealloc_pd(c.pd))
		ret = 1;
	free(c.buf);
	if (id && rdma_destroy_id(id))
		ret = 1;
	if (ch)
		rdma_destroy_event_channel(ch);
	if (ret == 0)
		printf("OK\n");
	return ret;
}

int main(int argc, char **argv)
{
	const char *port = "7472";
	int clients = 1, timeout_ms = 5000, max_open = MAX_OPEN, msgs = 1, delay_ms = 0, opt;
	int show_grants = 0, one_pd = 0;
	uint32_t version = PROTO_VERSION;
	struct grant stolen, *steal = NULL;
	unsigned long long saddr;
	unsigned int srkey;

	setvbuf(stdout, NULL, _IOLBF, 0);
	alarm(300); /* never hang forever */
	if (argc < 2 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
		fprintf(stderr, "usage: %s server [-p port] [-n clients] [-c max_open] [-g] [-1]\n"
				"       %s client [-p port] [-v version] [-t ms] [-r messages] "
				"[-d delay_ms] [-s addr:rkey] SERVER\n",
			argv[0], argv[0]);
		return 1;
	}
	optind = 2;
	while ((opt = getopt(argc, argv, "p:n:c:v:t:r:d:gs:1")) != -1) {
		switch (opt) {
		case 'p': port = optarg; break;
		case 'n': clients = atoi(optarg); break;
		case 'v': version = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 't': timeout_ms = atoi(optarg); break;
		case 'c': max_open = atoi(optarg); break;
		case 'r': msgs = atoi(optarg); break;
		case 'd': delay_ms = atoi(optarg); break;
		case 'g': show_grants = 1; break;
		case '1': one_pd = 1; break;
		case 's':
			if (sscanf(optarg, "%llx:%x", &saddr, &srkey) != 2) {
				FAIL("-s wants addr:rkey in hex, as the server's -g prints them");
				return 1;
			}
			/* In the wire's byte order, as a grant arrives. */
			stolen.addr = htobe64(saddr);
			stolen.rkey = htonl(srkey);
			steal = &stolen;
			break;
		default: return 1;
		}
	}
	if (!strcmp(argv[1], "server"))
		return run_server(port, clients > 0 ? clients : 1, max_open > 0 ? max_open : 1,
				  show_grants, one_pd);
	if (optind >= argc) {
		FAIL("client: which server?");
		return 1;
	}
	return run_client(argv[optind], port, version, timeout_ms, msgs > 0 ? msgs : 1,
			  delay_ms > 0 ? delay_ms : 0, steal);
}
