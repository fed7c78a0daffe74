/*
 * 05_rdma_cm.c - chapter 5: connecting with librdmacm instead of a hand-made exchange.
 *
 * librdmacm (the RDMA connection manager) speaks IP addresses and ports, finds the
 * device and GID for you, exchanges QPN/PSN with the peer and drives the QP through
 * INIT/RTR/RTS. This program forks: the parent is a server listening on the device's
 * IPv4 address, the child a client that connects, sends one message and disconnects.
 * Both print the connection-manager events they see.
 *
 * The address is taken from the device's GID table (the RoCE v2 GID ::ffff:a.b.c.d);
 * it must be the address of the RDMA-capable interface, never 127.0.0.1 (lo has no
 * RDMA device).
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -o 05_rdma_cm 05_rdma_cm.c -libverbs -lrdmacm
 * Run:   ./05_rdma_cm [device] [tcp-port]
 */
#include <sys/wait.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include "lab_common.h"

#define MSG 64

/* Per-connection verbs objects, created on the device librdmacm picked. */
struct conn {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	char *buf; /* registered memory: on the heap, page-aligned, never on the stack */
};

/*
 * Wait for the next event; fail unless it is `want`. The event is acknowledged. *id_out
 * is set only for the wanted event: an unexpected event may carry the LISTENING id, and
 * a caller that took it for a new connection would destroy the listener twice.
 */
static int expect_event(const char *who, struct rdma_event_channel *ch,
			enum rdma_cm_event_type want, struct rdma_cm_id **id_out)
{
	struct rdma_cm_event *ev;
	enum rdma_cm_event_type got;

	if (rdma_get_cm_event(ch, &ev)) {
		FAIL("%s: rdma_get_cm_event: %s", who, strerror(errno));
		return -1;
	}
	got = ev->event;
	if (id_out && got == want)
		*id_out = ev->id;
	printf("%s: event %s (status %d)\n", who, rdma_event_str(got), ev->status);
	fflush(stdout);
	if (rdma_ack_cm_event(ev)) {
		FAIL("%s: rdma_ack_cm_event", who);
		return -1;
	}
	if (got != want) {
		FAIL("%s: expected %s", who, rdma_event_str(want));
		return -1;
	}
	return 0;
}

/* PD, CQ, MR and an RC QP on the device behind `id`. */
static int conn_setup(const char *who, struct rdma_cm_id *id, struct conn *c)
{
	struct ibv_qp_init_attr init;

	memset(c, 0, sizeof(*c));
	c->pd = ibv_alloc_pd(id->verbs);
	c->cq = c->pd ? ibv_create_cq(id->verbs, 8, NULL, NULL, 0) : NULL;
	if (c->cq && posix_memalign((void **)&c->buf, (size_t)sysconf(_SC_PAGESIZE), MSG) == 0)
		memset(c->buf, 0, MSG);
	c->mr = c->buf ? ibv_reg_mr(c->pd, c->buf, MSG, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!c->mr) {
		FAIL("%s: PD/CQ/MR: %s", who, strerror(errno));
		return -1;
	}
	memset(&init, 0, sizeof(init));
	init.send_cq = c->cq;
	init.recv_cq = c->cq;
	init.qp_type = IBV_QPT_RC;
	init.sq_sig_all = 1;
	init.cap.max_send_wr = 4;
	init.cap.max_recv_wr = 4;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, c->pd, &init)) {
		FAIL("%s: rdma_create_qp: %s", who, strerror(errno));
		return -1;
	}
	printf("%s: QP 0x%06x on %s\n", who, id->qp->qp_num,
	       ibv_get_device_name(id->verbs->device));
	return 0;
}

/* Children first: QP, then MR and CQ, then PD. Returns -1 if anything failed. */
static int conn_free(struct rdma_cm_id *id, struct conn *c)
{
	int bad = 0;

	if (id && id->qp)
		rdma_destroy_qp(id); /* returns nothing */
	if (c->mr && ibv_dereg_mr(c->mr))
		bad = 1;
	if (c->cq && ibv_destroy_cq(c->cq))
		bad = 1;
	if (c->pd && ibv_dealloc_pd(c->pd))
		bad = 1;
	free(c->buf);
	c->buf = NULL;
	if (bad)
		FAIL("teardown of the connection's verbs objects failed");
	return bad ? -1 : 0;
}

static int wait_ok(const char *who, struct conn *c, struct ibv_wc *wc)
{
	if (poll_wc(c->cq, wc, 5000) != 1 || wc->status != IBV_WC_SUCCESS) {
		FAIL("%s: no successful completion", who);
		return -1;
	}
	return 0;
}

static int server(struct sockaddr_in *addr, int ready_fd)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listen_id = NULL, *id = NULL;
	struct rdma_conn_param param;
	struct conn c = { 0 };
	struct ibv_wc wc;
	int ret = 1;

	if (!ch || rdma_create_id(ch, &listen_id, NULL, RDMA_PS_TCP)) {
		FAIL("server: create id: %s", strerror(errno));
		goto out;
	}
	if (rdma_bind_addr(listen_id, (struct sockaddr *)addr) || rdma_listen(listen_id, 1)) {
		FAIL("server: bind/listen: %s", strerror(errno));
		goto out;
	}
	printf("server: listening on %s:%d\n", inet_ntoa(addr->sin_addr), ntohs(addr->sin_port));
	fflush(stdout);
	if (write(ready_fd, "r", 1) != 1) { /* tell the client it may connect */
		FAIL("server: pipe");
		goto out;
	}
	/* The request arrives on a NEW id, the one that will carry the connection. */
	if (expect_event("server", ch, RDMA_CM_EVENT_CONNECT_REQUEST, &id) ||
	    conn_setup("server", id, &c))
		goto out;
	{
		struct ibv_sge sge = { (uintptr_t)c.buf, MSG, c.mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;

		if (ibv_post_recv(id->qp, &wr, &bad)) { /* before accepting: no RNR */
			FAIL("server: ibv_post_recv");
			goto out;
		}
	}
	memset(&param, 0, sizeof(param));
	param.rnr_retry_count = 6; /* finite: see chapter 8 */
	if (rdma_accept(id, &param)) {
		FAIL("server: rdma_accept: %s", strerror(errno));
		goto out;
	}
	if (expect_event("server", ch, RDMA_CM_EVENT_ESTABLISHED, NULL) ||
	    wait_ok("server", &c, &wc))
		goto out;
	printf("server: received %u bytes: \"%s\"\n", wc.byte_len, c.buf);
	fflush(stdout);
	if (expect_event("server", ch, RDMA_CM_EVENT_DISCONNECTED, NULL))
		goto out;
	/* The client's DREQ came: answer it (DREP) and move our QP to ERR. Without this
	 * call, the DREP would wait for rdma_destroy_id(). */
	if (rdma_disconnect(id)) {
		FAIL("server: rdma_disconnect: %s", strerror(errno));
		goto out;
	}
	ret = 0;
out:
	if (conn_free(id, &c))
		ret = 1;
	if (id && id != listen_id && rdma_destroy_id(id))
		ret = 1;
	if (listen_id && rdma_destroy_id(listen_id))
		ret = 1;
	if (ch)
		rdma_destroy_event_channel(ch);
	return ret;
}

static int client(struct sockaddr_in *addr)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	struct rdma_conn_param param;
	struct conn c = { 0 };
	struct ibv_wc wc;
	int ret = 1;

	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		FAIL("client: create id: %s", strerror(errno));
		goto out;
	}
	/* IP address -> device, port and GID; then the path. */
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)addr, 2000) ||
	    expect_event("client", ch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL) ||
	    rdma_resolve_route(id, 2000) ||
	    expect_event("client", ch, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL) ||
	    conn_setup("client", id, &c))
		goto out;
	memset(&param, 0, sizeof(param));
	param.retry_count = 7;
	param.rnr_retry_count = 6; /* finite: see chapter 8 */
	if (rdma_connect(id, &param) ||
	    expect_event("client", ch, RDMA_CM_EVENT_ESTABLISHED, NULL))
		goto out;
	snprintf(c.buf, MSG, "hello over rdma_cm from QP 0x%06x", id->qp->qp_num);
	{
		struct ibv_sge sge = { (uintptr_t)c.buf, MSG, c.mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND }, *bad;

		if (ibv_post_send(id->qp, &wr, &bad) || wait_ok("client", &c, &wc))
			goto out;
	}
	printf("client: send completed: %s\n", ibv_wc_status_str(wc.status));
	if (rdma_disconnect(id) ||
	    expect_event("client", ch, RDMA_CM_EVENT_DISCONNECTED, NULL))
		goto out;
	ret = 0;
out:
	if (conn_free(id, &c))
		ret = 1;
	if (id && rdma_destroy_id(id))
		ret = 1;
	if (ch)
		rdma_destroy_event_channel(ch);
	return ret;
}

int main(int argc, char **argv)
{
	struct ibv_context *ctx;
	struct sockaddr_in addr;
	union ibv_gid gid;
	int gid_index, pipefd[2], status, rc;
	char c;
	pid_t pid;

	/* Two processes share this terminal: print whole lines, flushed as they come. */
	setvbuf(stdout, NULL, _IOLBF, 0);

	/* Find the device's IPv4 address in its GID table. */
	ctx = open_device(argc > 1 ? argv[1] : NULL);
	if (!ctx)
		return 1;
	rc = pick_gid(ctx, 1, lab_netdev(), &gid_index, &gid);
	if (ibv_close_device(ctx) || rc)
		return 1;
	if (gid.raw[10] != 0xff || gid.raw[11] != 0xff) {
		FAIL("gid[%d] carries no IPv4 address", gid_index);
		return 1;
	}
	memset(&addr, 0, sizeof(addr));
	addr.sin_family = AF_INET;
	memcpy(&addr.sin_addr, &gid.raw[12], 4);
	addr.sin_port = htons(argc > 2 ? (uint16_t)atoi(argv[2]) : 7471);
	printf("gid[%d] -> IPv4 %s\n", gid_index, inet_ntoa(addr.sin_addr));
	fflush(stdout);

	if (pipe(pipefd)) {
		FAIL("pipe: %s", strerror(errno));
		return 1;
	}
	pid = fork();
	if (pid < 0) {
		FAIL("fork: %s", strerror(errno));
		return 1;
	}
	if (pid == 0) { /* client */
		close(pipefd[1]);
		alarm(30); /* never hang forever */
		if (read(pipefd[0], &c, 1) != 1) {
			FAIL("client: server never became ready");
			_exit(1);
		}
		close(pipefd[0]);
		_exit(client(&addr));
	}
	close(pipefd[0]);
	alarm(30);
	rc = server(&addr, pipefd[1]);
	close(pipefd[1]);
	if (waitpid(pid, &status, 0) < 0) {
		FAIL("waitpid: %s", strerror(errno));
		return 1;
	}
	if (rc == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
		printf("OK\n");
		return 0;
	}
	FAIL("server %d, client status %d", rc, status);
	return 1;
}
