/*
 * 13_tos.c - chapter 13: the ToS of an rdma_cm connection, where RoCE's lossless
 * configuration starts.
 *
 * On RoCE v2 the IP header's ToS byte is the QP's GRH traffic class: its upper six bits
 * are the DSCP that switches and the NIC map to a priority (and so to PFC), its lower two
 * the ECN field. librdmacm sets the traffic class from the connection id's ToS: the
 * value given with rdma_set_option(RDMA_OPTION_ID_TOS) before the route is resolved, or
 * else the device's default (configfs: rdma_cm/<dev>/ports/<port>/default_roce_tos, 0
 * unless an administrator set it).
 *
 * One process, one event channel: a listener on the device's IPv4 address, and two
 * client connections to it, the first with the default ToS and the second with ToS 106
 * (DSCP 26, ECT(0): a common choice for RoCE traffic). For each, both QPs are queried
 * (ibv_query_qp, IBV_QP_AV) and their traffic class printed: the passive side takes the
 * one the connect request carried.
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -o 13_tos 13_tos.c -libverbs -lrdmacm
 * Run:   ./13_tos [device] [tcp-port] [tos]
 */
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include "lab_common.h"

/* One end of a connection: the id and the verbs objects of its QP. */
struct end {
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
};

static int end_qp(const char *who, struct end *e)
{
	struct ibv_qp_init_attr init;

	e->pd = ibv_alloc_pd(e->id->verbs);
	e->cq = e->pd ? ibv_create_cq(e->id->verbs, 4, NULL, NULL, 0) : NULL;
	if (!e->cq) {
		FAIL("%s: PD/CQ: %s", who, strerror(errno));
		return -1;
	}
	memset(&init, 0, sizeof(init));
	init.send_cq = e->cq;
	init.recv_cq = e->cq;
	init.qp_type = IBV_QPT_RC;
	init.cap.max_send_wr = 1;
	init.cap.max_recv_wr = 1;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	if (rdma_create_qp(e->id, e->pd, &init)) {
		FAIL("%s: rdma_create_qp: %s", who, strerror(errno));
		return -1;
	}
	return 0;
}

/* QP, CQ, PD, then the id (which may be NULL). Returns -1 if anything failed. */
static int end_free(struct end *e)
{
	int bad = 0;

	if (e->id && e->id->qp)
		rdma_destroy_qp(e->id);
	if (e->cq && ibv_destroy_cq(e->cq))
		bad = 1;
	if (e->pd && ibv_dealloc_pd(e->pd))
		bad = 1;
	if (e->id && rdma_destroy_id(e->id))
		bad = 1;
	memset(e, 0, sizeof(*e));
	return bad ? -1 : 0;
}

/* The next event, which must be `want`; *id_out gets its id. Acknowledged here. */
static int next_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
		      struct rdma_cm_id **id_out)
{
	struct rdma_cm_event *ev;
	enum rdma_cm_event_type got;
	int status;

	if (rdma_get_cm_event(ch, &ev)) {
		FAIL("rdma_get_cm_event: %s", strerror(errno));
		return -1;
	}
	got = ev->event;
	status = ev->status;
	if (id_out && got == want)
		*id_out = ev->id;
	if (rdma_ack_cm_event(ev)) {
		FAIL("rdma_ack_cm_event");
		return -1;
	}
	if (got != want) {
		FAIL("expected %s, got %s (status %d)", rdma_event_str(want), rdma_event_str(got),
		     status);
		return -1;
	}
	return 0;
}

/* Print the traffic class a QP puts in its GRH (= the IPv4 ToS on RoCE v2). */
static int show_qp(const char *who, struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	uint8_t tc;

	if (ibv_query_qp(qp, &a, IBV_QP_AV | IBV_QP_PATH_MTU, &ia)) {
		FAIL("%s: ibv_query_qp: %s", who, strerror(errno));
		return -1;
	}
	tc = a.ah_attr.grh.traffic_class;
	printf("  %-6s QP traffic class %3u = DSCP %2u, ECN %u; SL %u, path MTU %d\n", who, tc,
	       tc >> 2, tc & 3, a.ah_attr.sl, 128 << a.path_mtu);
	return 0;
}

/* The device's default ToS for rdma_cm, if configfs shows it; -1 when it does not. */
static int configfs_default_tos(const char *dev)
{
	char path[256];
	FILE *f;
	int v = -1;

	snprintf(path, sizeof(path), "/sys/kernel/config/rdma_cm/%s/ports/1/default_roce_tos",
		 dev);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (fscanf(f, "%d", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

/*
 * One connection from a new client id to the listener; `tos` < 0 leaves the default.
 * Both ends are queried once established, then disconnected and freed.
 */
static int one_connection(struct rdma_event_channel *ch, struct sockaddr_in *addr, int tos)
{
	struct end cli = { 0 }, srv = { 0 };
	struct rdma_conn_param param;
	struct rdma_cm_id *who = NULL;
	int ret = -1;

	if (rdma_create_id(ch, &cli.id, NULL, RDMA_PS_TCP)) {
		FAIL("rdma_create_id: %s", strerror(errno));
		return -1;
	}
	if (tos >= 0) {
		uint8_t t = (uint8_t)tos;

		/* Before rdma_resolve_route: the route (and the QP's AV) is built from it. */
		if (rdma_set_option(cli.id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &t, sizeof(t))) {
			FAIL("rdma_set_option(TOS): %s", strerror(errno));
			goto out;
		}
		printf("connection with rdma_set_option(RDMA_OPTION_ID_TOS, %u):\n", t);
	} else {
		printf("connection with the default ToS:\n");
	}
	if (rdma_resolve_addr(cli.id, NULL, (struct sockaddr *)addr, 2000) ||
	    next_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL) ||
	    rdma_resolve_route(cli.id, 2000) ||
	    next_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL) || end_qp("client", &cli))
		goto out;
	memset(&param, 0, sizeof(param));
	param.retry_count = 7;
	param.rnr_retry_count = 6;
	if (rdma_connect(cli.id, &param)) {
		FAIL("rdma_connect: %s", strerror(errno));
		goto out;
	}
	/* The listener's event: a new id for the passive side. */
	if (next_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, &srv.id) || end_qp("server", &srv))
		goto out;
	memset(&param, 0, sizeof(param));
	param.rnr_retry_count = 6;
	if (rdma_accept(srv.id, &param)) {
		FAIL("rdma_accept: %s", strerror(errno));
		goto out;
	}
	/* Both ends report ESTABLISHED on the one channel, in either order. */
	if (next_event(ch, RDMA_CM_EVENT_ESTABLISHED, NULL) ||
	    next_event(ch, RDMA_CM_EVENT_ESTABLISHED, NULL))
		goto out;
	if (cli.id->route.path_rec)
		printf("  route: traffic class %u\n", cli.id->route.path_rec->traffic_class);
	if (show_qp("client", cli.id->qp) || show_qp("server", srv.id->qp))
		goto out;
	/*
	 * The client's DREQ raises DISCONNECTED on the server's id; the server answers with
	 * its own rdma_disconnect (the DREP), which raises DISCONNECTED on the client's.
	 */
	if (rdma_disconnect(cli.id) || next_event(ch, RDMA_CM_EVENT_DISCONNECTED, &who) ||
	    (who == srv.id && rdma_disconnect(srv.id)) ||
	    next_event(ch, RDMA_CM_EVENT_DISCONNECTED, NULL))
		goto out;
	ret = 0;
out:
	if (end_free(&srv) || end_free(&cli))
		ret = -1;
	return ret;
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch = NULL;
	struct rdma_cm_id *listen_id = NULL;
	struct ibv_context *ctx;
	struct sockaddr_in addr;
	union ibv_gid gid;
	const char *dev;
	int gid_index, rc, tos, def, ret = 1;

	ctx = open_device(argc > 1 ? argv[1] : NULL);
	if (!ctx)
		return 1;
	dev = argc > 1 ? argv[1] : ibv_get_device_name(ctx->device);
	def = configfs_default_tos(dev);
	if (def >= 0)
		printf("configfs rdma_cm/%s/ports/1/default_roce_tos: %d\n", dev, def);
	else
		printf("configfs rdma_cm/%s: not present (default ToS 0)\n", dev);
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
	addr.sin_port = htons(argc > 2 ? (uint16_t)atoi(argv[2]) : 7473);
	tos = argc > 3 ? atoi(argv[3]) : 106;
	if (tos < 0 || tos > 255) {
		FAIL("ToS %d is not a byte", tos);
		return 1;
	}
	alarm(60); /* never hang forever */

	ch = rdma_create_event_channel();
	if (!ch || rdma_create_id(ch, &listen_id, NULL, RDMA_PS_TCP)) {
		FAIL("create channel/id: %s", strerror(errno));
		goto out;
	}
	if (rdma_bind_addr(listen_id, (struct sockaddr *)&addr) || rdma_listen(listen_id, 2)) {
		FAIL("bind/listen on %s: %s", inet_ntoa(addr.sin_addr), strerror(errno));
		goto out;
	}
	printf("listening on %s:%d\n", inet_ntoa(addr.sin_addr), ntohs(addr.sin_port));
	if (one_connection(ch, &addr, -1) || one_connection(ch, &addr, tos))
		goto out;
	ret = 0;
out:
	if (listen_id && rdma_destroy_id(listen_id))
		ret = 1;
	if (ch)
		rdma_destroy_event_channel(ch);
	if (ret == 0)
		printf("OK\n");
	return ret;
}
