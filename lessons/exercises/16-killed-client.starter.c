/*
 * 16-killed-client (chapters 9 and 16): a server that survives a client killed
 * mid-transfer.
 *
 *   server, on h2: ./16-killed-client server PORT
 *   client, on h1: ./16-killed-client client SERVER PORT MESSAGES DELAY_MS
 *
 * The server serves CLIENTS (2) connections, one after the other or at once, from one
 * poll() loop over the CM event channel and one completion channel shared by every
 * connection's CQ. Each connection has its own PD, CQ, MR and QP and keeps RECV_SLOTS
 * receives posted; the client SENDs MESSAGES short messages, DELAY_MS apart, then
 * disconnects. The check kills the first client with SIGKILL after a few messages: its
 * kernel closes the dead process's files and sends the DREQ, and the server sees
 * DISCONNECTED like any other.
 *
 * TODO: write the server's DISCONNECTED handler (on_disconnected): the connection is
 * over; free it without leaving anything the device still owns, and go on serving.
 *
 * The check (`rdmactl lesson exercise check 16-killed-client`) runs the server on h2 and,
 * on h1, a client killed mid-transfer and then a client that sends 10 messages. It reads
 * rxe0 on h2 at the server's lab_checkpoint() (after both connections ended, before the
 * server closes its listener): no PD, CQ, QP or MR more than before the server started.
 * The server must exit 0, and h2 must have consumed the SENDs of both clients.
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -o 16-killed-client 16-killed-client.c -libverbs -lrdmacm
 */
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include "lab_common.h"

#define CLIENTS 2
#define RECV_SLOTS 4
#define SLOT 32

struct conn {
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	char buf[RECV_SLOTS * SLOT];
	int posted;  /* receives posted and not completed yet */
	int flushed; /* completed with IBV_WC_WR_FLUSH_ERR */
	int closing;
	int msgs;
};

static struct ibv_comp_channel *chan;

static void set_nonblocking(int fd)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* Children before parents: QP, MR, CQ, PD, then the id. */
static void conn_free(struct conn *c)
{
	if (c->id->qp)
		rdma_destroy_qp(c->id);
	if (c->mr && ibv_dereg_mr(c->mr))
		FAIL("ibv_dereg_mr");
	if (c->cq && ibv_destroy_cq(c->cq))
		FAIL("ibv_destroy_cq");
	if (c->pd && ibv_dealloc_pd(c->pd))
		FAIL("ibv_dealloc_pd");
	rdma_destroy_id(c->id);
	free(c);
}

static int conn_post(struct conn *c, uint64_t slot)
{
	if (post_recv_one(c->id->qp, c->mr, c->buf + slot * SLOT, SLOT, slot))
		return -1;
	c->posted++;
	return 0;
}

/* Every completion of the connection's CQ; receives are posted again unless closing. */
static int conn_poll(struct conn *c)
{
	struct ibv_wc wc;
	int n;

	while ((n = ibv_poll_cq(c->cq, 1, &wc)) == 1) {
		c->posted--;
		if (wc.status == IBV_WC_WR_FLUSH_ERR) {
			c->flushed++;
			continue;
		}
		if (wc.status != IBV_WC_SUCCESS) {
			printf("server: completion %s\n", wc_status_name(wc.status));
			continue;
		}
		c->msgs++;
		if (!c->closing && conn_post(c, wc.wr_id))
			return -1;
	}
	return n < 0 ? -1 : 0;
}

/* A new connection: its own PD, CQ (on the shared channel, armed), MR and QP. */
static struct conn *conn_new(struct rdma_cm_id *id)
{
	struct conn *c = calloc(1, sizeof(*c));
	struct ibv_qp_init_attr init;
	int i;

	if (!c)
		return NULL;
	c->id = id;
	id->context = c;
	c->pd = ibv_alloc_pd(id->verbs);
	c->cq = c->pd ? ibv_create_cq(id->verbs, RECV_SLOTS, c, chan, 0) : NULL;
	c->mr = c->cq ? ibv_reg_mr(c->pd, c->buf, sizeof(c->buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!c->mr || ibv_req_notify_cq(c->cq, 0)) {
		FAIL("server: PD, CQ or MR: %s", strerror(errno));
		goto fail;
	}
	memset(&init, 0, sizeof(init));
	init.send_cq = c->cq;
	init.recv_cq = c->cq;
	init.qp_type = IBV_QPT_RC;
	init.cap.max_send_wr = 1;
	init.cap.max_recv_wr = RECV_SLOTS;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, c->pd, &init)) {
		FAIL("server: rdma_create_qp: %s", strerror(errno));
		goto fail;
	}
	for (i = 0; i < RECV_SLOTS; i++)
		if (conn_post(c, (uint64_t)i))
			goto fail;
	return c;
fail:
	conn_free(c);
	return NULL;
}

/* The connection is over: the client disconnected, or died and its kernel sent the
 * DREQ. Returns 0 when the connection was freed cleanly. */
static int on_disconnected(struct conn *c)
{
	rdma_disconnect(c->id); /* answer the DREQ */
	/* TODO: move the QP to ERR, poll the CQ until every posted receive has come back
	 * (flushed), then free the connection (conn_free). */
	printf("server: a client disconnected after %d messages\n", c->msgs);
	return 0;
}

static int run_server(const char *port)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listener = NULL;
	struct sockaddr_in addr = { .sin_family = AF_INET };
	int ended = 0, ret = 1;

	addr.sin_port = htons((uint16_t)atoi(port));
	if (!ch || rdma_create_id(ch, &listener, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(listener, (struct sockaddr *)&addr) || rdma_listen(listener, 4)) {
		FAIL("server: listen on port %s: %s", port, strerror(errno));
		goto out;
	}
	/* The listener is bound to every address: its verbs context is known only with
	 * the first request, so the completion channel is created then. */
	set_nonblocking(ch->fd);
	printf("server: listening on port %s for %d clients\n", port, CLIENTS);
	while (ended < CLIENTS) {
		struct pollfd fds[2] = { { .fd = ch->fd, .events = POLLIN },
					 { .fd = chan ? chan->fd : -1, .events = POLLIN } };
		struct rdma_cm_event *ev, copy;
		struct ibv_cq *cq;
		void *ctx;
		int n = poll(fds, 2, 120000);

		if (n <= 0) {
			FAIL("server: %s", n == 0 ? "no event in 120 s" : strerror(errno));
			goto out;
		}
		while (rdma_get_cm_event(ch, &ev) == 0) {
			copy = *ev;
			rdma_ack_cm_event(ev);
			switch (copy.event) {
			case RDMA_CM_EVENT_CONNECT_REQUEST: {
				struct rdma_conn_param cp = { .rnr_retry_count = 7 };
				struct conn *c;

				if (!chan) {
					chan = ibv_create_comp_channel(copy.id->verbs);
					if (!chan) {
						FAIL("server: ibv_create_comp_channel");
						goto out;
					}
					set_nonblocking(chan->fd);
				}
				c = conn_new(copy.id);
				if (!c || rdma_accept(copy.id, &cp)) {
					FAIL("server: accept: %s", strerror(errno));
					goto out;
				}
				break;
			}
			case RDMA_CM_EVENT_ESTABLISHED:
				printf("server: a client connected\n");
				break;
			case RDMA_CM_EVENT_DISCONNECTED:
			case RDMA_CM_EVENT_CONNECT_ERROR:
			case RDMA_CM_EVENT_UNREACHABLE:
			case RDMA_CM_EVENT_REJECTED:
				if (!copy.id->context)
					break; /* not one of our connections */
				ended++;
				if (on_disconnected(copy.id->context))
					goto out;
				break;
			default:
				break;
			}
		}
		/* Completion events: acknowledge, re-arm, then poll (chapter 16). */
		while (chan && ibv_get_cq_event(chan, &cq, &ctx) == 0) {
			ibv_ack_cq_events(cq, 1);
			if (ibv_req_notify_cq(cq, 0) || conn_poll(ctx))
				goto out;
		}
	}
	printf("server: %d connections ended\n", ended);
	lab_checkpoint(); /* the checker reads rdma resource show here */
	ret = 0;
out:
	if (listener)
		rdma_destroy_id(listener);
	if (chan && ibv_destroy_comp_channel(chan)) {
		FAIL("server: ibv_destroy_comp_channel: %s (a CQ still uses it)", strerror(errno));
		ret = 1;
	}
	if (ch)
		rdma_destroy_event_channel(ch);
	if (ret == 0)
		printf("OK\n");
	return ret;
}

/* The client: connect (trying again while nobody listens, at most 90 s), SEND `count`
 * messages one at a time, `delay_ms` apart, disconnect. */
static int run_client(const char *server, const char *port, int count, int delay_ms)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	struct rdma_cm_event *ev;
	struct ibv_pd *pd = NULL;
	struct ibv_cq *cq = NULL;
	struct ibv_mr *mr = NULL;
	struct addrinfo *ai = NULL;
	double deadline = now_us() + 90e6;
	static char msg[SLOT];
	int i, connected = 0, ret = 1;

	if (!ch || getaddrinfo(server, port, NULL, &ai)) {
		FAIL("client: event channel or address %s", server);
		goto out;
	}
	while (!connected && now_us() < deadline) {
		struct ibv_qp_init_attr init = { .qp_type = IBV_QPT_RC,
						 .cap = { .max_send_wr = 1, .max_recv_wr = 1,
							  .max_send_sge = 1, .max_recv_sge = 1 } };
		struct rdma_conn_param cp = { .retry_count = 7, .rnr_retry_count = 7 };
		enum rdma_cm_event_type got;

		if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) ||
		    rdma_resolve_addr(id, NULL, ai->ai_addr, 3000) || rdma_get_cm_event(ch, &ev))
			goto out;
		got = ev->event;
		rdma_ack_cm_event(ev);
		if (got != RDMA_CM_EVENT_ADDR_RESOLVED || rdma_resolve_route(id, 3000) ||
		    rdma_get_cm_event(ch, &ev))
			goto out;
		got = ev->event;
		rdma_ack_cm_event(ev);
		pd = got == RDMA_CM_EVENT_ROUTE_RESOLVED ? ibv_alloc_pd(id->verbs) : NULL;
		cq = pd ? ibv_create_cq(id->verbs, 2, NULL, NULL, 0) : NULL;
		mr = cq ? ibv_reg_mr(pd, msg, sizeof(msg), 0) : NULL;
		init.send_cq = init.recv_cq = cq;
		if (!mr || rdma_create_qp(id, pd, &init) || rdma_connect(id, &cp) ||
		    rdma_get_cm_event(ch, &ev)) {
			FAIL("client: connect: %s", strerror(errno));
			goto out;
		}
		got = ev->event;
		rdma_ack_cm_event(ev);
		if (got == RDMA_CM_EVENT_ESTABLISHED) {
			connected = 1;
			break;
		}
		if (got != RDMA_CM_EVENT_REJECTED)
			goto out;
		/* Nobody listens yet: free this attempt and try again. */
		rdma_destroy_qp(id);
		ibv_dereg_mr(mr);
		ibv_destroy_cq(cq);
		ibv_dealloc_pd(pd);
		rdma_destroy_id(id);
		id = NULL;
		mr = NULL;
		cq = NULL;
		pd = NULL;
		nanosleep(&(struct timespec){ .tv_nsec = 200000000L }, NULL);
	}
	if (!connected)
		goto out;
	for (i = 0; i < count; i++) {
		struct ibv_wc wc;

		snprintf(msg, sizeof(msg), "message %d", i);
		if (post_one(id->qp, IBV_WR_SEND, mr, msg, SLOT, 0, 0, (uint64_t)i) ||
		    poll_wc(cq, &wc, 10000) != 1 || wc.status != IBV_WC_SUCCESS) {
			FAIL("client: SEND %d did not complete", i);
			goto out;
		}
		printf("client: message %d sent\n", i);
		if (delay_ms)
			nanosleep(&(struct timespec){ .tv_sec = delay_ms / 1000,
						      .tv_nsec = (delay_ms % 1000) * 1000000L },
				  NULL);
	}
	ret = 0;
out:
	if (connected && rdma_disconnect(id) == 0 && rdma_get_cm_event(ch, &ev) == 0)
		rdma_ack_cm_event(ev); /* our DISCONNECTED */
	if (id && id->qp)
		rdma_destroy_qp(id);
	if (mr)
		ibv_dereg_mr(mr);
	if (cq)
		ibv_destroy_cq(cq);
	if (pd)
		ibv_dealloc_pd(pd);
	if (id)
		rdma_destroy_id(id);
	if (ai)
		freeaddrinfo(ai);
	if (ch)
		rdma_destroy_event_channel(ch);
	if (ret == 0)
		printf("OK\n");
	return ret;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && strcmp(argv[1], "server") == 0)
		return run_server(argv[2]);
	if (argc == 6 && strcmp(argv[1], "client") == 0)
		return run_client(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
	fprintf(stderr, "usage: %s server PORT | client SERVER PORT MESSAGES DELAY_MS\n",
		argv[0]);
	return 2;
}
