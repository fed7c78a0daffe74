/*
 * 05_cm_ep.c - chapter 5: librdmacm's convenience API, and what private data the peer
 * really receives.
 *
 * rdma_getaddrinfo() turns a host and a port into addresses; rdma_create_ep() makes the
 * cm_id, resolves address and route, and creates PD, CQs and QP in one call;
 * rdma_get_request() waits for a client; rdma_post_send/recv() post one SGE;
 * rdma_get_send_comp/recv_comp() block until a completion. No event channel, no verbs
 * objects of our own: the same steps as 05_rdma_cm.c, done by the library
 * (rdma-core's librdmacm/examples/rdma_server.c and rdma_client.c work this way).
 *
 * Private data: the client sends 6 bytes with its connect request, the server 8 with its
 * accept. Each side prints how many bytes its event says it received: the CM pads the
 * message to a fixed size, so the receiver cannot learn the sender's length from the
 * event. Then the client asks for one byte more than the request can carry.
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -o 05_cm_ep 05_cm_ep.c -libverbs -lrdmacm
 * Run:   ./05_cm_ep [device] [tcp-port]
 */
#include <netdb.h>
#include <sys/wait.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include "lab_common.h"

#define MSG 64

/* The QP both sides ask rdma_create_ep() for: one SEND and one receive at a time. */
static void qp_caps(struct ibv_qp_init_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->cap.max_send_wr = a->cap.max_recv_wr = 1;
	a->cap.max_send_sge = a->cap.max_recv_sge = 1;
	a->qp_type = IBV_QPT_RC;
	a->sq_sig_all = 1;
}

/* The first `len` bytes of private data as text, dots for zeros. */
static void show_private(const char *who, const void *data, uint8_t len)
{
	const unsigned char *p = data;
	int nonzero = 0, i;

	for (i = 0; i < len; i++)
		if (p[i])
			nonzero = i + 1;
	printf("%s: private_data_len %u; bytes after the last nonzero one: %d; text \"%s\"\n",
	       who, len, len - nonzero, len ? (const char *)data : "");
}

static int server(const char *ip, const char *port, int ready_fd)
{
	struct rdma_addrinfo hints, *res = NULL;
	struct rdma_cm_id *listen_id = NULL, *id = NULL;
	struct rdma_conn_param param;
	struct ibv_qp_init_attr attr;
	struct ibv_mr *mr = NULL;
	struct ibv_wc wc;
	char *buf = NULL;
	const char welcome[8] = "welcome";
	int rc = 1, n;

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	n = rdma_getaddrinfo(ip, port, &hints, &res);
	if (n) {
		FAIL("server: rdma_getaddrinfo: %s", gai_strerror(n));
		return 1;
	}
	qp_caps(&attr);
	/* Passive: a listening cm_id; each request gets its own id, PD, CQs and QP. */
	if (rdma_create_ep(&listen_id, res, NULL, &attr)) {
		FAIL("server: rdma_create_ep: %s", strerror(errno));
		goto out;
	}
	if (rdma_listen(listen_id, 1)) {
		FAIL("server: rdma_listen: %s", strerror(errno));
		goto out;
	}
	printf("server: listening on %s:%s\n", ip, port);
	if (write(ready_fd, "r", 1) != 1)
		goto out;
	/* Blocks until a CONNECT_REQUEST; the new id already has its QP (in INIT). */
	if (rdma_get_request(listen_id, &id)) {
		FAIL("server: rdma_get_request: %s", strerror(errno));
		goto out;
	}
	show_private("server: connect request", id->event->param.conn.private_data,
		     id->event->param.conn.private_data_len);
	buf = calloc(1, MSG);
	mr = buf ? rdma_reg_msgs(id, buf, MSG) : NULL; /* LOCAL_WRITE, on the id's PD */
	if (!mr) {
		FAIL("server: rdma_reg_msgs: %s", strerror(errno));
		goto out;
	}
	/* The receive must be there before the client can send: post it before accepting. */
	if (rdma_post_recv(id, NULL, buf, MSG, mr)) {
		FAIL("server: rdma_post_recv: %s", strerror(errno));
		goto out;
	}
	memset(&param, 0, sizeof(param));
	param.private_data = welcome;
	param.private_data_len = sizeof(welcome);
	if (rdma_accept(id, &param)) {
		FAIL("server: rdma_accept: %s", strerror(errno));
		goto out;
	}
	/* 0: nothing yet (the call re-arms and waits), 1: one completion, <0: error. */
	while ((n = rdma_get_recv_comp(id, &wc)) == 0)
		;
	if (n < 0 || wc.status != IBV_WC_SUCCESS) {
		FAIL("server: receive: %s", n < 0 ? strerror(errno) : wc_status_name(wc.status));
		goto out;
	}
	printf("server: received %u bytes: \"%s\"\n", wc.byte_len, buf);
	snprintf(buf, MSG, "reply from rdma_post_send");
	if (rdma_post_send(id, NULL, buf, MSG, mr, 0)) {
		FAIL("server: rdma_post_send: %s", strerror(errno));
		goto out;
	}
	while ((n = rdma_get_send_comp(id, &wc)) == 0)
		;
	if (n < 0 || wc.status != IBV_WC_SUCCESS) {
		FAIL("server: send: %s", n < 0 ? strerror(errno) : wc_status_name(wc.status));
		goto out;
	}
	printf("server: send completion: %s\n", wc_status_name(wc.status));
	rc = 0;
out:
	if (id)
		rdma_disconnect(id); /* the client sees it; errors here change nothing */
	if (mr)
		rdma_dereg_mr(mr);
	if (id)
		rdma_destroy_ep(id); /* QP, CQs, then the id */
	if (listen_id)
		rdma_destroy_ep(listen_id);
	if (res)
		rdma_freeaddrinfo(res);
	free(buf);
	return rc;
}

static int client(const char *ip, const char *port)
{
	struct rdma_addrinfo hints, *res = NULL;
	struct rdma_cm_id *id = NULL;
	struct rdma_conn_param param;
	struct ibv_qp_init_attr attr;
	struct ibv_mr *mr = NULL;
	struct ibv_wc wc;
	char *buf = NULL;
	char big[57], hello[6] = "hello";
	int rc = 1, n;

	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_TCP;
	n = rdma_getaddrinfo(ip, port, &hints, &res);
	if (n) {
		FAIL("client: rdma_getaddrinfo: %s", gai_strerror(n));
		return 1;
	}
	qp_caps(&attr);
	/* Active: address and route resolved, PD, CQs and QP created, all in this call. */
	if (rdma_create_ep(&id, res, NULL, &attr)) {
		FAIL("client: rdma_create_ep: %s", strerror(errno));
		goto out;
	}
	printf("client: rdma_create_ep: device %s, QP 0x%06x\n",
	       ibv_get_device_name(id->verbs->device), id->qp->qp_num);
	buf = calloc(2, MSG); /* [0, MSG): what we send; [MSG, 2 MSG): the reply */
	mr = buf ? rdma_reg_msgs(id, buf, 2 * MSG) : NULL;
	if (!mr || rdma_post_recv(id, NULL, buf + MSG, MSG, mr)) {
		FAIL("client: rdma_reg_msgs/rdma_post_recv: %s", strerror(errno));
		goto out;
	}
	/* One byte more than a connect request carries after the CM's own header. */
	memset(big, 'x', sizeof(big));
	memset(&param, 0, sizeof(param));
	param.private_data = big;
	param.private_data_len = sizeof(big);
	param.retry_count = 7;
	param.rnr_retry_count = LAB_RNR_RETRY;
	if (rdma_connect(id, &param) == 0) {
		FAIL("client: rdma_connect with %zu bytes of private data succeeded", sizeof(big));
		goto out;
	}
	printf("client: rdma_connect with %zu bytes of private data: refused, errno %d (%s)\n",
	       sizeof(big), errno, strerror(errno));
	param.private_data = hello;
	param.private_data_len = sizeof(hello);
	if (rdma_connect(id, &param)) {
		FAIL("client: rdma_connect: %s", strerror(errno));
		goto out;
	}
	/* A synchronous id keeps the last event: here ESTABLISHED, with the accept's data. */
	show_private("client: established", id->event->param.conn.private_data,
		     id->event->param.conn.private_data_len);
	snprintf(buf, MSG, "hello from rdma_post_send");
	if (rdma_post_send(id, NULL, buf, MSG, mr, 0)) {
		FAIL("client: rdma_post_send: %s", strerror(errno));
		goto out;
	}
	while ((n = rdma_get_send_comp(id, &wc)) == 0)
		;
	if (n < 0 || wc.status != IBV_WC_SUCCESS) {
		FAIL("client: send: %s", n < 0 ? strerror(errno) : wc_status_name(wc.status));
		goto out;
	}
	while ((n = rdma_get_recv_comp(id, &wc)) == 0)
		;
	if (n < 0 || wc.status != IBV_WC_SUCCESS) {
		FAIL("client: receive: %s", n < 0 ? strerror(errno) : wc_status_name(wc.status));
		goto out;
	}
	printf("client: received %u bytes: \"%s\"\n", wc.byte_len, buf + MSG);
	rc = 0;
out:
	if (id && id->qp)
		rdma_disconnect(id);
	if (mr)
		rdma_dereg_mr(mr);
	if (id)
		rdma_destroy_ep(id);
	if (res)
		rdma_freeaddrinfo(res);
	free(buf);
	return rc;
}

int main(int argc, char **argv)
{
	struct ibv_context *ctx;
	union ibv_gid gid;
	char ip[INET_ADDRSTRLEN], c;
	const char *port = argc > 2 ? argv[2] : "7472";
	int gid_index, pipefd[2], status, rc;
	pid_t pid;

	setvbuf(stdout, NULL, _IOLBF, 0);
	/* The device's IPv4 address, from its GID table (as 05_rdma_cm.c). */
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
	inet_ntop(AF_INET, &gid.raw[12], ip, sizeof(ip));
	if (pipe(pipefd)) {
		FAIL("pipe: %s", strerror(errno));
		return 1;
	}
	pid = fork();
	if (pid < 0) {
		FAIL("fork: %s", strerror(errno));
		return 1;
	}
	if (pid == 0) {
		close(pipefd[1]);
		alarm(30);
		if (read(pipefd[0], &c, 1) != 1) {
			FAIL("client: server never became ready");
			_exit(1);
		}
		_exit(client(ip, port));
	}
	close(pipefd[0]);
	alarm(30);
	rc = server(ip, port, pipefd[1]);
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
