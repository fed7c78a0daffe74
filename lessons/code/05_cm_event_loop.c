/*
 * 05_cm_event_loop.c - chapter 5: an rdma_cm server for many clients, and its client,
 * each driven by ONE event loop, between two machines.
 *
 *   server: ./05_cm_event_loop server [-p port] [-n clients]
 *   client: ./05_cm_event_loop client [-p port] [-v version] [-t timeout_ms] SERVER
 *
 * The client says hello in the CONNECT REQUEST's private data (a protocol version and a
 * name). The server refuses a version it does not speak with rdma_reject() and a reason
 * in the reject's private data; it accepts the others with private data that carry where
 * the client may write: the address, length and rkey of a buffer registered for that
 * connection only. The client RDMA-WRITEs a line there, then SENDs a short "done"; RC
 * delivers in order, so when the server sees the SEND the WRITE is in its buffer. The
 * client disconnects; the server frees that connection and serves the next, and exits
 * after `clients` connections have been served.
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
#include <poll.h>
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

/* ------------------------------------------------------------------------------ server */

struct conn {
	struct rdma_cm_id *id;
	struct ibv_mr *wmr, *rmr;
	char *wbuf;   /* remote-writable, this connection only */
	char rbuf[16]; /* the "done" SEND lands here */
	char name[33];
};

struct server {
	struct ibv_pd *pd; /* one PD and CQ on the device the requests come to */
	struct ibv_cq *cq;
	struct ibv_context *verbs;
	int served, refused, open;
};

static void conn_free(struct conn *c)
{
	if (c->id->qp)
		rdma_destroy_qp(c->id);
	if (c->wmr && ibv_dereg_mr(c->wmr))
		FAIL("ibv_dereg_mr");
	if (c->rmr && ibv_dereg_mr(c->rmr))
		FAIL("ibv_dereg_mr");
	if (rdma_destroy_id(c->id))
		FAIL("rdma_destroy_id: %s", strerror(errno));
	free(c->wbuf);
	free(c);
}

/* A CONNECT_REQUEST: refuse it, or set up its QP and accept it. Returns -1 on error. */
static int on_connect_request(struct server *sv, struct rdma_cm_id *id, const void *pdata,
			      uint8_t plen)
{
	struct hello h;
	struct grant g;
	struct refusal no;
	struct ibv_qp_init_attr init;
	struct rdma_conn_param param;
	struct conn *c;

	memset(&h, 0, sizeof(h));
	memcpy(&h, pdata, plen < sizeof(h) ? plen : sizeof(h));
	if (ntohl(h.version) != PROTO_VERSION) {
		memset(&no, 0, sizeof(no));
		snprintf(no.reason, sizeof(no.reason), "protocol version %u, I speak %d",
			 ntohl(h.version), PROTO_VERSION);
		printf("server: refusing a client: %s\n", no.reason);
		sv->refused++;
		if (rdma_reject(id, &no, sizeof(no)))
			FAIL("rdma_reject: %s", strerror(errno));
		/* A refused request's id is ours to destroy. */
		return rdma_destroy_id(id) ? -1 : 0;
	}
	if (!sv->pd) {
		sv->verbs = id->verbs;
		sv->pd = ibv_alloc_pd(id->verbs);
		sv->cq = sv->pd ? ibv_create_cq(id->verbs, 64, NULL, NULL, 0) : NULL;
		if (!sv->cq) {
			FAIL("server: PD/CQ: %s", strerror(errno));
			return -1;
		}
	}
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
	c->wbuf = calloc(1, WBUF);
	c->wmr = c->wbuf ? ibv_reg_mr(sv->pd, c->wbuf, WBUF,
				      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) :
			   NULL;
	c->rmr = c->wmr ? ibv_reg_mr(sv->pd, c->rbuf, sizeof(c->rbuf), IBV_ACCESS_LOCAL_WRITE) :
			  NULL;
	memset(&init, 0, sizeof(init));
	init.send_cq = sv->cq;
	init.recv_cq = sv->cq;
	init.qp_type = IBV_QPT_RC;
	init.sq_sig_all = 1;
	init.cap.max_send_wr = 2;
	init.cap.max_recv_wr = 2;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	if (!c->rmr || rdma_create_qp(id, sv->pd, &init)) {
		FAIL("server: MRs/QP: %s", strerror(errno));
		conn_free(c);
		return -1;
	}
	{
		struct ibv_sge sge = { (uintptr_t)c->rbuf, sizeof(c->rbuf), c->rmr->lkey };
		struct ibv_recv_wr wr = { .wr_id = (uintptr_t)c, .sg_list = &sge, .num_sge = 1 },
				   *bad;

		if (ibv_post_recv(id->qp, &wr, &bad)) { /* before accepting: no RNR */
			FAIL("server: ibv_post_recv");
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
	if (rdma_accept(id, &param)) {
		FAIL("server: rdma_accept: %s", strerror(errno));
		conn_free(c);
		return -1;
	}
	sv->open++;
	printf("server: accepted client \"%s\" on QP 0x%06x (%d open)\n", c->name,
	       id->qp->qp_num, sv->open);
	return 0;
}

/* Drain the CQ: a receive means that client's WRITE has landed. */
static int server_poll_cq(struct server *sv)
{
	struct ibv_wc wc;
	int n;

	while (sv->cq && (n = ibv_poll_cq(sv->cq, 1, &wc)) == 1) {
		struct conn *c = (struct conn *)(uintptr_t)wc.wr_id;

		if (wc.status != IBV_WC_SUCCESS) {
			/* A flushed receive after a disconnect is normal; anything else is not. */
			if (wc.status != IBV_WC_WR_FLUSH_ERR)
				printf("server: completion %s\n", wc_status_name(wc.status));
			continue;
		}
		c->wbuf[WBUF - 1] = 0;
		printf("server: \"%s\" wrote: \"%s\"\n", c->name, c->wbuf);
	}
	return 0;
}

static int run_server(const char *port, int clients)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listener = NULL;
	struct sockaddr_in addr;
	struct server sv;
	int ret = 1;

	memset(&sv, 0, sizeof(sv));
	memset(&addr, 0, sizeof(addr));
	addr.sin_family = AF_INET; /* INADDR_ANY: every RDMA device's address */
	addr.sin_port = htons((uint16_t)atoi(port));
	if (!ch || rdma_create_id(ch, &listener, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(listener, (struct sockaddr *)&addr) || rdma_listen(listener, 8)) {
		FAIL("server: listen on port %s: %s", port, strerror(errno));
		goto out;
	}
	printf("server: listening on port %s for %d clients\n", port, clients);
	while (sv.served < clients) {
		struct pollfd p = { .fd = ch->fd, .events = POLLIN };
		struct rdma_cm_event *ev;
		struct rdma_cm_event copy;
		uint8_t pdata[64];
		uint8_t plen;

		if (poll(&p, 1, 10) < 0) {
			FAIL("poll: %s", strerror(errno));
			goto out;
		}
		server_poll_cq(&sv);
		if (!(p.revents & POLLIN))
			continue;
		if (rdma_get_cm_event(ch, &ev)) {
			FAIL("rdma_get_cm_event: %s", strerror(errno));
			goto out;
		}
		/* Copy what we need and acknowledge at once: rdma_destroy_id() of an id
		 * waits until all of its events are acknowledged. */
		copy = *ev;
		plen = ev->param.conn.private_data_len < sizeof(pdata) ?
			       ev->param.conn.private_data_len :
			       sizeof(pdata);
		if (plen)
			memcpy(pdata, ev->param.conn.private_data, plen);
		print_event("server", ev);
		rdma_ack_cm_event(ev);

		switch (copy.event) {
		case RDMA_CM_EVENT_CONNECT_REQUEST:
			/* A NEW id for this connection; the listener stays as it is. */
			if (on_connect_request(&sv, copy.id, pdata, plen))
				goto out;
			break;
		case RDMA_CM_EVENT_ESTABLISHED:
			printf("server: \"%s\" is connected\n",
			       ((struct conn *)copy.id->context)->name);
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
			/* The client is done: its receive completed before its DREQ came. */
			server_poll_cq(&sv);
			printf("server: \"%s\" disconnected\n",
			       ((struct conn *)copy.id->context)->name);
			rdma_disconnect(copy.id); /* answer the DREQ; harmless if already done */
			conn_free(copy.id->context);
			sv.open--;
			sv.served++;
			break;
		case RDMA_CM_EVENT_CONNECT_ERROR:
		case RDMA_CM_EVENT_UNREACHABLE:
		case RDMA_CM_EVENT_REJECTED:
			/* An accepted connection that never became ESTABLISHED. */
			conn_free(copy.id->context);
			sv.open--;
			break;
		case RDMA_CM_EVENT_DEVICE_REMOVAL:
			FAIL("server: the device went away");
			goto out;
		case RDMA_CM_EVENT_TIMEWAIT_EXIT:
		default:
			break;
		}
	}
	printf("server: served %d clients, refused %d\n", sv.served, sv.refused);
	ret = 0;
out:
	if (sv.open)
		FAIL("server: %d connections still open", sv.open);
	if (listener && rdma_destroy_id(listener))
		ret = 1;
	if (sv.cq && ibv_destroy_cq(sv.cq))
		ret = 1;
	if (sv.pd && ibv_dealloc_pd(sv.pd))
		ret = 1;
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
	char buf[WBUF]; /* local only: what we write and send */
};

static int client_setup(struct rdma_cm_id *id, struct client *c)
{
	struct ibv_qp_init_attr init;

	c->pd = ibv_alloc_pd(id->verbs);
	c->cq = c->pd ? ibv_create_cq(id->verbs, 8, NULL, NULL, 0) : NULL;
	c->mr = c->cq ? ibv_reg_mr(c->pd, c->buf, sizeof(c->buf), 0) : NULL;
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

/* ESTABLISHED: WRITE a line into the server's buffer, then SEND "done". */
static int client_work(struct rdma_cm_id *id, struct client *c, const char *name,
		       const void *pdata, uint8_t plen)
{
	struct grant g;
	struct ibv_wc wc;
	int i;

	if (plen < sizeof(g)) {
		FAIL("client: the accept carried %u bytes of private data, not a grant", plen);
		return -1;
	}
	memcpy(&g, pdata, sizeof(g));
	/* The rkey is a capability: use it, never print it. */
	printf("client: the server grants %u bytes to write\n", ntohl(g.len));
	snprintf(c->buf, sizeof(c->buf), "hello from %s, QP 0x%06x", name, id->qp->qp_num);
	if (strlen(c->buf) + 1 > ntohl(g.len)) {
		FAIL("client: the grant is too small");
		return -1;
	}
	if (post_one(id->qp, IBV_WR_RDMA_WRITE, c->mr, c->buf, (uint32_t)strlen(c->buf) + 1,
		     be64toh(g.addr), ntohl(g.rkey), 1) ||
	    post_one(id->qp, IBV_WR_SEND, c->mr, c->buf, 5, 0, 0, 2))
		return -1;
	for (i = 0; i < 2; i++) {
		if (poll_wc(c->cq, &wc, 30000) != 1 || wc.status != IBV_WC_SUCCESS) {
			FAIL("client: %s", i ? "SEND failed" : "WRITE failed");
			return -1;
		}
	}
	printf("client: WRITE and SEND completed\n");
	return 0;
}

static int run_client(const char *server, const char *port, uint32_t version, int timeout_ms)
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
			if (rdma_resolve_route(id, timeout_ms))
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
			if (client_work(id, &c, name, pdata, plen) || rdma_disconnect(id))
				ret = 1;
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
	int clients = 1, timeout_ms = 5000, opt;
	uint32_t version = PROTO_VERSION;

	setvbuf(stdout, NULL, _IOLBF, 0);
	alarm(300); /* never hang forever */
	if (argc < 2 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
		fprintf(stderr, "usage: %s server [-p port] [-n clients]\n"
				"       %s client [-p port] [-v version] [-t ms] SERVER\n",
			argv[0], argv[0]);
		return 1;
	}
	optind = 2;
	while ((opt = getopt(argc, argv, "p:n:v:t:")) != -1) {
		switch (opt) {
		case 'p': port = optarg; break;
		case 'n': clients = atoi(optarg); break;
		case 'v': version = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 't': timeout_ms = atoi(optarg); break;
		default: return 1;
		}
	}
	if (!strcmp(argv[1], "server"))
		return run_server(port, clients > 0 ? clients : 1);
	if (optind >= argc) {
		FAIL("client: which server?");
		return 1;
	}
	return run_client(argv[optind], port, version, timeout_ms);
}
