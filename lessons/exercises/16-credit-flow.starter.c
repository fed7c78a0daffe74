/*
 * 16-credit-flow (chapters 13 and 16): credit-based flow control between two hosts.
 *
 *   receiver, on h2: ./16-credit-flow server PORT
 *   sender,   on h1: ./16-credit-flow client SERVER PORT
 *
 * The receiver posts only RECV_SLOTS (4) receives and takes its time with each message
 * (HANDLE_MS, a stand-in for the application's work) before it posts that receive again.
 * Both sides connect with rnr_retry_count 0: a SEND that finds no posted receive is
 * answered with an RNR NAK and the sender's QP fails at once
 * (IBV_WC_RNR_RETRY_EXC_ERR). The sender must deliver MESSAGES (32) SENDs all the same.
 *
 * The protocol: the receiver grants its first RECV_SLOTS credits in the accept's private
 * data. After re-posting receives it returns their credits with a SEND of its own: a
 * "credit message" holding a 32-bit count, one per CREDIT_BATCH receives. The sender
 * spends one credit per SEND, waits for a credit message when it has none, and re-posts
 * the receive each credit message used.
 *
 * TODO: make both sides keep the protocol (the receiver's part and the sender's part).
 *
 * The check (`rdmactl lesson exercise check 16-credit-flow`) runs the receiver on h2 and
 * the sender on h1 of the multi-host lab and reads rxe0 on both: at least 32 receives
 * consumed on h2, no RNR NAK sent by h2 nor received by h1, both exit 0, nothing left
 * behind.
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -o 16-credit-flow 16-credit-flow.c -libverbs -lrdmacm
 */
#include <fcntl.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include "lab_common.h"

#define MESSAGES 32
#define RECV_SLOTS 4   /* the receiver's receives: its credits */
#define CREDIT_BATCH 2 /* receives posted again per credit message */
#define HANDLE_MS 50   /* the receiver's work per message */
#define SLOT 32

struct side {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *listener, *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	char buf[(RECV_SLOTS + MESSAGES) * SLOT]; /* receive slots, then send slots */
	int disconnected;
};

static char *rslot(struct side *s, uint64_t i)
{
	return s->buf + i * SLOT;
}

static char *sslot(struct side *s, uint64_t i)
{
	return s->buf + (RECV_SLOTS + i % MESSAGES) * SLOT;
}

/* The next CM event, which must be `want`; its private data's first 4 bytes if asked. */
static int get_event(struct side *s, enum rdma_cm_event_type want, struct rdma_cm_event *copy,
		     uint32_t *pdata)
{
	struct rdma_cm_event *ev;

	if (rdma_get_cm_event(s->ch, &ev)) {
		FAIL("rdma_get_cm_event: %s", strerror(errno));
		return -1;
	}
	*copy = *ev;
	if (pdata && ev->param.conn.private_data_len >= sizeof(*pdata))
		memcpy(pdata, ev->param.conn.private_data, sizeof(*pdata));
	rdma_ack_cm_event(ev);
	if (copy->event != want) {
		if (want != RDMA_CM_EVENT_ESTABLISHED || copy->event != RDMA_CM_EVENT_REJECTED)
			FAIL("expected %s, got %s (status %d)", rdma_event_str(want),
			     rdma_event_str(copy->event), copy->status);
		return -1;
	}
	return 0;
}

/* PD, CQ, QP and MR for the connection on s->id; RECV_SLOTS receives posted. */
static int resources(struct side *s)
{
	struct ibv_qp_init_attr init;
	uint64_t i;

	s->pd = ibv_alloc_pd(s->id->verbs);
	s->cq = s->pd ? ibv_create_cq(s->id->verbs, MESSAGES + RECV_SLOTS, NULL, NULL, 0) : NULL;
	s->mr = s->cq ? ibv_reg_mr(s->pd, s->buf, sizeof(s->buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!s->mr) {
		FAIL("PD, CQ or MR: %s", strerror(errno));
		return -1;
	}
	memset(&init, 0, sizeof(init));
	init.send_cq = s->cq;
	init.recv_cq = s->cq;
	init.qp_type = IBV_QPT_RC;
	init.sq_sig_all = 1;
	init.cap.max_send_wr = MESSAGES;
	init.cap.max_recv_wr = RECV_SLOTS;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	if (rdma_create_qp(s->id, s->pd, &init)) {
		FAIL("rdma_create_qp: %s", strerror(errno));
		return -1;
	}
	for (i = 0; i < RECV_SLOTS; i++)
		if (post_recv_one(s->id->qp, s->mr, rslot(s, i), SLOT, i))
			return -1;
	return 0;
}

/* The connection's objects, children first; the channel and listener stay. */
static void conn_free(struct side *s)
{
	if (s->id && s->id->qp)
		rdma_destroy_qp(s->id);
	if (s->mr && ibv_dereg_mr(s->mr))
		FAIL("ibv_dereg_mr");
	if (s->cq && ibv_destroy_cq(s->cq))
		FAIL("ibv_destroy_cq");
	if (s->pd && ibv_dealloc_pd(s->pd))
		FAIL("ibv_dealloc_pd");
	if (s->id)
		rdma_destroy_id(s->id);
	s->mr = NULL;
	s->cq = NULL;
	s->pd = NULL;
	s->id = NULL;
}

/* Note a DISCONNECTED that came while polling (the channel is non-blocking then). */
static void check_disconnect(struct side *s)
{
	struct rdma_cm_event *ev;

	while (rdma_get_cm_event(s->ch, &ev) == 0) {
		if (ev->event == RDMA_CM_EVENT_DISCONNECTED)
			s->disconnected = 1;
		rdma_ack_cm_event(ev);
	}
}

/* One completion; 0 after 30 s without one or once the peer disconnected; -1 on error. */
static int next_wc(struct side *s, struct ibv_wc *wc)
{
	double deadline = now_us() + 30e6;

	while (now_us() < deadline && !s->disconnected) {
		int n = ibv_poll_cq(s->cq, 1, wc);

		if (n != 0)
			return n;
		check_disconnect(s);
	}
	return 0;
}

/* SEND `len` bytes from send slot `i` (its wr_id says it is a send). */
static int send_msg(struct side *s, uint64_t i, const void *data, size_t len)
{
	memset(sslot(s, i), 0, SLOT);
	memcpy(sslot(s, i), data, len);
	return post_one(s->id->qp, IBV_WR_SEND, s->mr, sslot(s, i), SLOT, 0, 0, RECV_SLOTS + i);
}

static int run_server(const char *port)
{
	static struct side s;
	struct rdma_cm_event ev;
	struct rdma_conn_param cp;
	struct sockaddr_in addr = { .sin_family = AF_INET };
	uint32_t grant = htonl(RECV_SLOTS);
	int received = 0, to_return = 0, granted = RECV_SLOTS, credit_msgs = 0, sends = 0;
	int ret = 1;
	struct ibv_wc wc;

	addr.sin_port = htons((uint16_t)atoi(port));
	s.ch = rdma_create_event_channel();
	if (!s.ch || rdma_create_id(s.ch, &s.listener, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(s.listener, (struct sockaddr *)&addr) || rdma_listen(s.listener, 1)) {
		FAIL("listen on port %s: %s", port, strerror(errno));
		goto out;
	}
	printf("receiver: listening on port %s\n", port);
	fflush(stdout);
	if (get_event(&s, RDMA_CM_EVENT_CONNECT_REQUEST, &ev, NULL))
		goto out;
	s.id = ev.id;
	if (resources(&s))
		goto out;
	memset(&cp, 0, sizeof(cp));
	cp.private_data = &grant; /* the first credits: one per posted receive */
	cp.private_data_len = sizeof(grant);
	cp.rnr_retry_count = 0;	  /* an RNR NAK fails the QP at once */
	if (rdma_accept(s.id, &cp) || get_event(&s, RDMA_CM_EVENT_ESTABLISHED, &ev, NULL))
		goto out;
	fcntl(s.ch->fd, F_SETFL, fcntl(s.ch->fd, F_GETFL) | O_NONBLOCK);
	while (received < MESSAGES || sends > 0) {
		int n = next_wc(&s, &wc);

		if (n <= 0) {
			FAIL("receiver: %s after %d messages",
			     s.disconnected ? "the sender disconnected" : "no completion", received);
			goto out;
		}
		if (wc.status != IBV_WC_SUCCESS) {
			FAIL("receiver: completion %s", wc_status_name(wc.status));
			goto out;
		}
		if (wc.opcode == IBV_WC_SEND) {
			sends--;
		} else {
			received++;
			nanosleep(&(struct timespec){ .tv_nsec = HANDLE_MS * 1000000L }, NULL);
			if (post_recv_one(s.id->qp, s.mr, rslot(&s, wc.wr_id), SLOT, wc.wr_id))
				goto out;
			to_return++;
		}
		/* TODO (receiver): each receive posted again is a credit to return. Return
		 * them CREDIT_BATCH at a time in a credit message (a SEND of the count, in
		 * network byte order), never more in all than the sender needs (MESSAGES),
		 * with at most RECV_SLOTS credit messages in flight. */
	}
	printf("receiver: %d messages; %d credits granted, %d in %d credit messages; %d not "
	       "returned\n",
	       received, granted, granted - RECV_SLOTS, credit_msgs, to_return);
	/* The sender disconnects once its SENDs have completed. */
	while (!s.disconnected) {
		int n = next_wc(&s, &wc);

		if (n < 0 || (n == 0 && !s.disconnected)) {
			FAIL("receiver: the sender never disconnected");
			goto out;
		}
	}
	ret = 0;
out:
	if (s.id)
		rdma_disconnect(s.id);
	conn_free(&s);
	if (s.listener)
		rdma_destroy_id(s.listener);
	if (s.ch)
		rdma_destroy_event_channel(s.ch);
	if (ret == 0)
		printf("OK\n");
	return ret;
}

/* Resolve and connect; while nobody listens yet (the receiver starts on the other host
 * at about the same time) try again, for at most 90 s. The first credits come in the
 * accept's private data. */
static int connect_to(struct side *s, const char *server, const char *port, uint32_t *credits)
{
	double deadline = now_us() + 90e6;
	struct rdma_cm_event ev;
	struct rdma_conn_param cp;
	struct addrinfo *ai;
	int ret = -1;

	if (getaddrinfo(server, port, NULL, &ai)) {
		FAIL("getaddrinfo %s %s", server, port);
		return -1;
	}
	while (now_us() < deadline) {
		if (rdma_create_id(s->ch, &s->id, NULL, RDMA_PS_TCP) ||
		    rdma_resolve_addr(s->id, NULL, ai->ai_addr, 3000) ||
		    get_event(s, RDMA_CM_EVENT_ADDR_RESOLVED, &ev, NULL) ||
		    rdma_resolve_route(s->id, 3000) ||
		    get_event(s, RDMA_CM_EVENT_ROUTE_RESOLVED, &ev, NULL) || resources(s))
			break;
		memset(&cp, 0, sizeof(cp));
		cp.rnr_retry_count = 0; /* an RNR NAK fails the QP at once */
		cp.retry_count = 7;
		if (rdma_connect(s->id, &cp)) {
			FAIL("rdma_connect: %s", strerror(errno));
			break;
		}
		if (get_event(s, RDMA_CM_EVENT_ESTABLISHED, &ev, credits) == 0) {
			ret = 0;
			break;
		}
		if (ev.event != RDMA_CM_EVENT_REJECTED)
			break;
		/* Rejected: nobody listens on the port yet. Free this attempt, try again. */
		conn_free(s);
		nanosleep(&(struct timespec){ .tv_nsec = 200000000L }, NULL);
	}
	freeaddrinfo(ai);
	return ret;
}

static int run_client(const char *server, const char *port)
{
	static struct side s;
	uint32_t credits = 0;
	int sent = 0, outstanding = 0, ret = 1;
	struct ibv_wc wc;

	s.ch = rdma_create_event_channel();
	if (!s.ch || connect_to(&s, server, port, &credits))
		goto out;
	credits = ntohl(credits);
	printf("sender: connected; the receiver grants %u credits to start with\n", credits);
	fcntl(s.ch->fd, F_SETFL, fcntl(s.ch->fd, F_GETFL) | O_NONBLOCK);
	while (sent < MESSAGES || outstanding > 0) {
		int n;

		/* TODO (sender): spend one credit per SEND; with none left, wait for the
		 * receiver's credit message instead of sending. */
		if (sent < MESSAGES) {
			char msg[SLOT];

			snprintf(msg, sizeof(msg), "message %d", sent);
			if (send_msg(&s, (uint64_t)sent, msg, strlen(msg) + 1))
				goto out;
			sent++;
			outstanding++;
			continue;
		}
		n = next_wc(&s, &wc);
		if (n <= 0) {
			FAIL("sender: no completion after %d messages", sent);
			goto out;
		}
		if (wc.status != IBV_WC_SUCCESS) {
			FAIL("sender: completion %s after %d messages", wc_status_name(wc.status),
			     sent);
			goto out;
		}
		if (wc.opcode == IBV_WC_SEND) {
			outstanding--;
		} else {
			uint32_t c;

			memcpy(&c, rslot(&s, wc.wr_id), sizeof(c));
			credits += ntohl(c);
			if (post_recv_one(s.id->qp, s.mr, rslot(&s, wc.wr_id), SLOT, wc.wr_id))
				goto out;
		}
	}
	printf("sender: %d messages sent\n", sent);
	ret = 0;
out:
	if (s.id && s.id->qp && rdma_disconnect(s.id) == 0 && ret == 0) {
		/* Wait for our own DISCONNECTED (bounded) before freeing. */
		double deadline = now_us() + 10e6;

		while (!s.disconnected && now_us() < deadline)
			check_disconnect(&s);
	}
	conn_free(&s);
	if (s.ch)
		rdma_destroy_event_channel(s.ch);
	if (ret == 0)
		printf("OK\n");
	return ret;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && strcmp(argv[1], "server") == 0)
		return run_server(argv[2]);
	if (argc == 4 && strcmp(argv[1], "client") == 0)
		return run_client(argv[2], argv[3]);
	fprintf(stderr, "usage: %s server PORT | client SERVER PORT\n", argv[0]);
	return 2;
}
