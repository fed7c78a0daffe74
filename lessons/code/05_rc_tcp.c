/*
 * 05_rc_tcp.c - chapter 5: an RC connection between two machines, set up over TCP.
 *
 * The pattern of rdma-core's ibv_rc_pingpong: each side creates its QP and picks a
 * random PSN, the two exchange what the other needs (LID, QPN, PSN, GID and the port's
 * active MTU) over one TCP connection, connect their QPs and then ping-pong SENDs.
 *
 *   server                                         client
 *   QP to INIT, post a receive                     QP to INIT, post a receive
 *   listen(port)  <--------- TCP connect ---------
 *                 <-- client: LID QPN PSN GID MTU -
 *   RTR(client's), RTS
 *                 --- server: LID QPN PSN GID MTU ->
 *                                                  RTR(server's), RTS
 *                 <------------ "go" --------------  then the client sends first
 *
 * The server connects its QP before it answers: when the client learns where to send,
 * the server can already receive. The TCP connection stays open afterwards and carries
 * one last line, the client's verdict, so that a server whose peer failed stops waiting.
 *
 * The path MTU is the smaller of both ports' active MTUs unless -m forces one: chapter 5
 * exercise 4 forces 4096 on a 1500-byte link to show what happens between two hosts.
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -o 05_rc_tcp 05_rc_tcp.c -libverbs
 * Run:   server: ./05_rc_tcp [-d dev] [-p port] [-s size] [-n iters]
 *        client: ./05_rc_tcp [-d dev] [-p port] [-s size] [-n iters] [-m mtu] SERVER
 *        -w seconds: how long to wait for one completion (default 60)
 */
#include <getopt.h>
#include <netdb.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>
#include <sys/socket.h>
#include "lab_common.h"

/* One line of the exchange: "LID QPN PSN GID MTU", all in hex but the GID and MTU. */
#define LINE 128

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *send_mr, *recv_mr;
	char *send_buf, *recv_buf; /* separate: a receive never overwrites what we send */
	struct ibv_port_attr pa;
	int gid_index;
	union ibv_gid gid;
	uint32_t psn;
	size_t size;
	int done[3]; /* completions seen and not yet waited for, by wr_id (1 recv, 2 send) */
};

static const int mtu_bytes[] = { 0, 256, 512, 1024, 2048, 4096 };

static enum ibv_mtu mtu_enum(int bytes)
{
	int i;

	for (i = 1; i <= 5; i++)
		if (mtu_bytes[i] == bytes)
			return (enum ibv_mtu)i;
	return (enum ibv_mtu)0;
}

/* Write all of `s` to the socket. */
static int send_line(int fd, const char *s)
{
	size_t n = strlen(s), off = 0;

	while (off < n) {
		ssize_t w = write(fd, s + off, n - off);

		if (w <= 0) {
			FAIL("TCP write: %s", w < 0 ? strerror(errno) : "closed");
			return -1;
		}
		off += (size_t)w;
	}
	return 0;
}

/* Read one '\n'-terminated line (without the '\n'), at most LINE-1 bytes. */
static int recv_line(int fd, char *buf)
{
	size_t n = 0;

	while (n < LINE - 1) {
		ssize_t r = read(fd, buf + n, 1);

		if (r <= 0) {
			FAIL("TCP read: %s", r < 0 ? strerror(errno) : "peer closed the connection");
			return -1;
		}
		if (buf[n] == '\n') {
			buf[n] = 0;
			return 0;
		}
		n++;
	}
	FAIL("TCP line too long");
	return -1;
}

static void info_line(const struct side *s, char *out)
{
	char gid[INET6_ADDRSTRLEN];

	inet_ntop(AF_INET6, s->gid.raw, gid, sizeof(gid));
	snprintf(out, LINE, "%04x %06x %06x %s %d\n", s->pa.lid, s->qp->qp_num, s->psn, gid,
		 mtu_bytes[s->pa.active_mtu]);
}

static int parse_info(const char *line, struct conn_info *c, int *mtu)
{
	unsigned int lid, qpn, psn;
	char gid[INET6_ADDRSTRLEN];

	if (sscanf(line, "%x %x %x %45s %d", &lid, &qpn, &psn, gid, mtu) != 5 ||
	    inet_pton(AF_INET6, gid, c->gid.raw) != 1 || !mtu_enum(*mtu)) {
		FAIL("bad connection data from the peer: \"%s\"", line);
		return -1;
	}
	c->lid = (uint16_t)lid;
	c->qpn = qpn;
	c->psn = psn;
	return 0;
}

static void print_addr(const char *what, uint16_t lid, uint32_t qpn, uint32_t psn,
		       const union ibv_gid *g, int mtu)
{
	char gid[INET6_ADDRSTRLEN];

	inet_ntop(AF_INET6, g->raw, gid, sizeof(gid));
	printf("%-15s LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s, active MTU %d\n", what, lid,
	       qpn, psn, gid, mtu);
}

static void side_close(struct side *s)
{
	if (s->qp && ibv_destroy_qp(s->qp))
		FAIL("ibv_destroy_qp");
	if (s->send_mr && ibv_dereg_mr(s->send_mr))
		FAIL("ibv_dereg_mr");
	if (s->recv_mr && ibv_dereg_mr(s->recv_mr))
		FAIL("ibv_dereg_mr");
	if (s->cq && ibv_destroy_cq(s->cq))
		FAIL("ibv_destroy_cq");
	if (s->pd && ibv_dealloc_pd(s->pd))
		FAIL("ibv_dealloc_pd");
	if (s->ctx && ibv_close_device(s->ctx))
		FAIL("ibv_close_device");
	free(s->send_buf);
	free(s->recv_buf);
}

static int side_open(struct side *s, const char *dev, size_t size)
{
	struct ibv_qp_init_attr init;

	memset(s, 0, sizeof(*s));
	s->size = size;
	s->ctx = open_device(dev);
	if (!s->ctx)
		return -1;
	if (ibv_query_port(s->ctx, 1, &s->pa) || s->pa.state != IBV_PORT_ACTIVE) {
		FAIL("port 1 is not ACTIVE");
		return -1;
	}
	if (pick_gid(s->ctx, 1, lab_netdev(), &s->gid_index, &s->gid))
		return -1;
	/* Async events are read without blocking while completions are awaited. */
	if (fcntl(s->ctx->async_fd, F_SETFL, fcntl(s->ctx->async_fd, F_GETFL) | O_NONBLOCK)) {
		FAIL("fcntl(async_fd): %s", strerror(errno));
		return -1;
	}
	s->send_buf = calloc(1, size);
	s->recv_buf = calloc(1, size);
	s->pd = ibv_alloc_pd(s->ctx);
	s->cq = s->pd ? ibv_create_cq(s->ctx, 16, NULL, NULL, 0) : NULL;
	/* Two-sided only: local rights, no remote ones. */
	s->send_mr = s->cq && s->send_buf ? ibv_reg_mr(s->pd, s->send_buf, size, 0) : NULL;
	s->recv_mr = s->send_mr && s->recv_buf ?
			     ibv_reg_mr(s->pd, s->recv_buf, size, IBV_ACCESS_LOCAL_WRITE) :
			     NULL;
	if (!s->recv_mr) {
		FAIL("buffers, PD, CQ or MRs: %s", strerror(errno));
		return -1;
	}
	memset(&init, 0, sizeof(init));
	init.send_cq = s->cq;
	init.recv_cq = s->cq;
	init.qp_type = IBV_QPT_RC;
	init.sq_sig_all = 1;
	init.cap.max_send_wr = 4;
	init.cap.max_recv_wr = 4;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	s->qp = ibv_create_qp(s->pd, &init);
	if (!s->qp) {
		FAIL("ibv_create_qp: %s", strerror(errno));
		return -1;
	}
	s->psn = random_psn();
	return 0;
}

/* RESET -> INIT, two-sided only (no remote rights): from INIT on, receives can be posted. */
static int side_init(struct side *s)
{
	struct ibv_qp_attr a;
	int rc;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	rc = ibv_modify_qp(s->qp, &a,
			   IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	if (rc)
		FAIL("modify to INIT: %s", strerror(rc));
	return rc ? -1 : 0;
}

/* INIT -> RTR -> RTS towards `peer`. */
static int side_connect(struct side *s, const struct conn_info *peer, enum ibv_mtu mtu)
{
	struct ibv_qp_attr a;
	const char *why = "";
	int rc;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = mtu;
	a.dest_qp_num = peer->qpn;
	a.rq_psn = peer->psn;
	a.min_rnr_timer = 12;
	if (ah_attr_for(&a.ah_attr, s->pa.link_layer, 1, s->gid_index, &s->gid, peer, &why)) {
		FAIL("address vector: %s", why);
		return -1;
	}
	rc = ibv_modify_qp(s->qp, &a,
			   IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				   IBV_QP_MIN_RNR_TIMER);
	if (rc) {
		FAIL("modify to RTR: %s", strerror(rc));
		return -1;
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = s->psn;
	a.timeout = 14; /* 4.096 us * 2^14 = 67 ms per try */
	a.retry_cnt = 7;
	a.rnr_retry = LAB_RNR_RETRY;
	rc = ibv_modify_qp(s->qp, &a,
			   IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				   IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
	if (rc) {
		FAIL("modify to RTS: %s", strerror(rc));
		return -1;
	}
	return 0;
}

static int post_recv(struct side *s)
{
	return post_recv_one(s->qp, s->recv_mr, s->recv_buf, (uint32_t)s->size, 1);
}

static int post_send(struct side *s)
{
	return post_one(s->qp, IBV_WR_SEND, s->send_mr, s->send_buf, (uint32_t)s->size, 0, 0, 2);
}

/*
 * Wait for the completion of `want` (1: receive, 2: send). While waiting, watch the TCP
 * socket: a peer that failed says so there ("fail ..."), and a receive that will never
 * come must not hang us. Returns 0 on success, -1 after printing why.
 */
static int wait_s = 60; /* -w: how long to wait for one completion */

/*
 * The device's async events (non-blocking fd, checked while a completion is awaited):
 * print and acknowledge each; -1 for one that means this connection is broken (a QP or
 * CQ error, the port or the device gone), which no completion may ever report.
 */
static int check_async(struct side *s, const char *who)
{
	struct ibv_async_event ae;
	int broken = 0;

	while (ibv_get_async_event(s->ctx, &ae) == 0) {
		printf("%s: async event %s\n", who, ibv_event_type_str(ae.event_type));
		switch (ae.event_type) {
		case IBV_EVENT_QP_FATAL:
		case IBV_EVENT_QP_REQ_ERR:
		case IBV_EVENT_QP_ACCESS_ERR:
		case IBV_EVENT_CQ_ERR:
		case IBV_EVENT_PORT_ERR:
		case IBV_EVENT_DEVICE_FATAL:
			broken = 1;
			break;
		default:
			break;
		}
		ibv_ack_async_event(&ae);
	}
	return broken ? -1 : 0;
}

static int wait_wc(struct side *s, int tcp, uint64_t want, const char *who)
{
	double deadline = now_us() + wait_s * 1e6;
	struct ibv_wc wc;
	char line[LINE];
	int n;

	while (now_us() < deadline) {
		n = ibv_poll_cq(s->cq, 1, &wc);
		if (n < 0) {
			FAIL("ibv_poll_cq: %d", n);
			return -1;
		}
		if (n == 1) {
			if (wc.status != IBV_WC_SUCCESS) {
				printf("%s: %s completion: %s (%d)\n", who,
				       wc.wr_id == 1 ? "receive" : "send",
				       wc_status_name(wc.status), wc.status);
				return -1;
			}
			/* The pong's receive may complete before our send's ACK is seen. */
			s->done[wc.wr_id == 1 ? 1 : 2]++;
		}
		if (s->done[want]) {
			s->done[want]--;
			return 0;
		}
		if (n == 1)
			continue;
		if (check_async(s, who))
			return -1;
		if (want == 1) {
			struct pollfd p = { .fd = tcp, .events = POLLIN };

			if (poll(&p, 1, 0) == 1) {
				if (recv_line(tcp, line) == 0)
					printf("%s: the peer says: %s\n", who, line);
				return -1;
			}
		}
	}
	printf("%s: no %s completion within %d s\n", who, want == 1 ? "receive" : "send", wait_s);
	return -1;
}

/* One TCP connection: the server's accepted one, or the client's. */
static int tcp_server(const char *port)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE }, *res;
	int one = 1, lfd, fd;

	if (getaddrinfo(NULL, port, &hints, &res)) {
		FAIL("getaddrinfo(port %s)", port);
		return -1;
	}
	lfd = socket(res->ai_family, res->ai_socktype, 0);
	if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(lfd, res->ai_addr, res->ai_addrlen) || listen(lfd, 1)) {
		FAIL("listen on port %s: %s", port, strerror(errno));
		freeaddrinfo(res);
		return -1;
	}
	freeaddrinfo(res);
	printf("server: waiting for a client on TCP port %s\n", port);
	fd = accept(lfd, NULL, NULL);
	close(lfd);
	if (fd < 0)
		FAIL("accept: %s", strerror(errno));
	return fd;
}

static int tcp_client(const char *host, const char *port)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res, *r;
	int fd = -1;

	if (getaddrinfo(host, port, &hints, &res)) {
		FAIL("cannot resolve %s", host);
		return -1;
	}
	for (r = res; r; r = r->ai_next) {
		fd = socket(r->ai_family, r->ai_socktype, 0);
		if (fd >= 0 && connect(fd, r->ai_addr, r->ai_addrlen) == 0)
			break;
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		FAIL("connect to %s port %s: %s", host, port, strerror(errno));
	return fd;
}

int main(int argc, char **argv)
{
	const char *dev = NULL, *port = "18515", *server = NULL;
	int iters = 100, force_mtu = 0, tcp = -1, peer_mtu, path, ret = 1, i, opt;
	size_t size = 4096;
	char line[LINE], verdict[LINE];
	struct conn_info peer;
	struct side s;
	double t0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((opt = getopt(argc, argv, "d:p:s:n:m:w:")) != -1) {
		switch (opt) {
		case 'd': dev = optarg; break;
		case 'p': port = optarg; break;
		case 's': size = strtoul(optarg, NULL, 0); break;
		case 'n': iters = atoi(optarg); break;
		case 'm': force_mtu = atoi(optarg); break;
		case 'w': wait_s = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s [-d dev] [-p port] [-s size] [-n iters] "
					"[-m mtu] [-w seconds] [server]\n", argv[0]);
			return 1;
		}
	}
	if (optind < argc)
		server = argv[optind];
	if (size < 16 || iters < 1 || wait_s < 1 || (force_mtu && !mtu_enum(force_mtu))) {
		FAIL("size at least 16, iterations and -w positive, -m one of 256 512 1024 2048 4096");
		return 1;
	}
	memset(&s, 0, sizeof(s));
	if (side_open(&s, dev, size))
		goto out;
	print_addr("local address:", s.pa.lid, s.qp->qp_num, s.psn, &s.gid,
		   mtu_bytes[s.pa.active_mtu]);
	/* Receives first (a QP in RESET takes none): the peer may send as soon as it is
	 * connected. */
	if (side_init(&s) || post_recv(&s))
		goto out;
	info_line(&s, line);
	if (server) {
		tcp = tcp_client(server, port);
		if (tcp < 0 || send_line(tcp, line) || recv_line(tcp, line) ||
		    parse_info(line, &peer, &peer_mtu))
			goto out;
	} else {
		tcp = tcp_server(port);
		if (tcp < 0 || recv_line(tcp, line) || parse_info(line, &peer, &peer_mtu))
			goto out;
	}
	print_addr("remote address:", peer.lid, peer.qpn, peer.psn, &peer.gid, peer_mtu);
	path = force_mtu ? force_mtu :
	       peer_mtu < mtu_bytes[s.pa.active_mtu] ? peer_mtu : mtu_bytes[s.pa.active_mtu];
	printf("path MTU %d (%s)\n", path, force_mtu ? "forced with -m" : "the smaller active MTU");
	if (side_connect(&s, &peer, mtu_enum(path)))
		goto out;
	if (!server) {
		/* Connected before answering: the client cannot send too early. */
		info_line(&s, line);
		if (send_line(tcp, line) || recv_line(tcp, line))
			goto out;
		if (strcmp(line, "go")) {
			FAIL("expected \"go\", got \"%s\"", line);
			goto out;
		}
	} else if (send_line(tcp, "go\n")) {
		goto out;
	}
	printf("%s: QP in RTS\n", server ? "client" : "server");

	/* The client pings, the server pongs; each message names its round. */
	t0 = now_us();
	for (i = 0; i < iters; i++) {
		if (server) {
			snprintf(s.send_buf, size, "ping %d", i);
			if (post_send(&s) || wait_wc(&s, tcp, 2, "client"))
				goto verdict;
			if (wait_wc(&s, tcp, 1, "client") || post_recv(&s))
				goto verdict;
		} else {
			if (wait_wc(&s, tcp, 1, "server"))
				goto out;
			snprintf(line, sizeof(line), "ping %d", i);
			if (strncmp(s.recv_buf, line, sizeof(line))) {
				FAIL("round %d: received \"%.20s\"", i, s.recv_buf);
				goto out;
			}
			if (post_recv(&s))
				goto out;
			snprintf(s.send_buf, size, "pong %d", i);
			if (post_send(&s) || wait_wc(&s, tcp, 2, "server"))
				goto out;
		}
	}
	printf("%d round trips of %zu bytes in %.0f us (%.1f us per round trip)\n", iters, size,
	       now_us() - t0, (now_us() - t0) / iters);
	ret = 0;
verdict:
	if (server) {
		/* The client tells the server how it ended; the server waits for this line. */
		snprintf(verdict, sizeof(verdict), "%s after %d of %d round trips\n",
			 ret ? "fail" : "done", i, iters);
		if (send_line(tcp, verdict))
			ret = 1;
	} else if (recv_line(tcp, verdict) || strncmp(verdict, "done", 4)) {
		ret = 1;
	}
out:
	if (tcp >= 0)
		close(tcp);
	side_close(&s);
	if (ret == 0)
		printf("OK\n");
	return ret;
}
