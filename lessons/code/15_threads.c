/*
 * 15_threads.c - chapter 15: verbs and threads.
 *
 *   1. Thread and parent domains: ibv_alloc_td() and ibv_alloc_parent_domain(), and what
 *      the device answers. A provider that implements them (mlx5) may drop the locks of
 *      the QPs created in such a domain; one that does not (rxe) fails with EOPNOTSUPP,
 *      and every object keeps its lock.
 *   2. One QP per thread, one CQ for all of them, a pool of pollers: T sender threads
 *      each own a loopback pair of RC QPs (A_t sends to B_t) and post M SENDs on A_t;
 *      every QP's send and receive completions go to ONE shared CQ, drained by P poller
 *      threads at once. A sender never has more than SQ_DEPTH SENDs outstanding: it
 *      learns of its completions from the pollers through an atomic counter.
 *   3. The check: every SEND and every receive completed exactly once, successfully,
 *      and each receive holds the payload its sender wrote (thread and sequence number);
 *      the pollers between them took exactly 2*T*M completions. Which poller took which
 *      completion differs from run to run, and so may the order in which one QP's
 *      completions are HANDLED: the CQ hands them out in order, but two pollers race
 *      once ibv_poll_cq() has returned.
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -pthread -o 15_threads 15_threads.c -libverbs
 * Run:   ./15_threads [device] [-t senders] [-p pollers] [-m messages]
 */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>
#include "lab_common.h"

#define SQ_DEPTH 16 /* SENDs in flight per sender thread */
#define MSG 32	    /* bytes per message */
#define MAX_T 16
#define MAX_P 16

struct sender {
	int t;			 /* thread number */
	struct loop l;		 /* l.qp[0] = A (sends), l.qp[1] = B (receives) */
	struct ibv_mr *mr;	 /* this thread's send and receive buffers */
	char *buf;		 /* SQ_DEPTH send slots, then M receive slots */
	atomic_int sends_done;	 /* send completions, counted by the pollers */
	atomic_int recvs_done;	 /* receive completions */
	atomic_uchar *seen;	 /* seen[seq]: the receive of message seq completed */
	atomic_int last_seq;	 /* the highest receive seq handled so far */
	atomic_int handled_late; /* receives handled after a later one of the same QP */
	int posted;		 /* SENDs posted */
};

static struct sender S[MAX_T];
static int T = 4, P = 3, M = 1000;
static struct ibv_cq *shared_cq;
static atomic_long total; /* completions taken by all pollers */
static atomic_int errors; /* completions in error, or with a wrong payload */
static atomic_int stop;
static double deadline; /* now_us() after which every thread gives up */

/* wr_id: thread (8 bits) | receive? (1 bit) | sequence number (the rest). */
static uint64_t wr_id(int t, int recv, int seq)
{
	return (uint64_t)t | (uint64_t)recv << 8 | (uint64_t)seq << 9;
}

static char *send_slot(struct sender *s, int seq)
{
	return s->buf + (size_t)(seq % SQ_DEPTH) * MSG;
}

static char *recv_slot(struct sender *s, int seq)
{
	return s->buf + (size_t)(SQ_DEPTH + seq) * MSG;
}

/* One receive completion: the right payload, never seen before. */
static void on_recv(struct sender *s, int seq, const struct ibv_wc *wc)
{
	char want[MSG];
	int prev = atomic_load(&s->last_seq);

	snprintf(want, sizeof(want), "thread %d message %d", s->t, seq);
	if (wc->byte_len != MSG || strcmp(recv_slot(s, seq), want) != 0 ||
	    atomic_exchange(&s->seen[seq], 1) != 0) {
		FAIL("thread %d: receive %d is wrong or was seen twice", s->t, seq);
		atomic_fetch_add(&errors, 1);
	}
	/* Raise last_seq to seq; if it was already higher, another poller handled a
	 * later completion of this QP first. */
	while (seq > prev && !atomic_compare_exchange_weak(&s->last_seq, &prev, seq))
		;
	if (seq < prev)
		atomic_fetch_add(&s->handled_late, 1);
	atomic_fetch_add(&s->recvs_done, 1);
}

static void *poller(void *arg)
{
	long *mine = arg, want = 2L * T * M;
	struct ibv_wc wc[16];

	while (!atomic_load(&stop)) {
		/* Several threads call ibv_poll_cq() on one CQ at once: the provider takes
		 * the CQ's lock inside the call, and each completion goes to one caller. */
		int i, n = ibv_poll_cq(shared_cq, 16, wc);

		if (n < 0) {
			FAIL("ibv_poll_cq: %d", n);
			atomic_fetch_add(&errors, 1);
			break;
		}
		for (i = 0; i < n; i++) {
			struct sender *s = &S[wc[i].wr_id & 0xff];
			int recv = (wc[i].wr_id >> 8) & 1, seq = (int)(wc[i].wr_id >> 9);

			if (wc[i].status != IBV_WC_SUCCESS) {
				FAIL("thread %d %s %d: %s", s->t, recv ? "receive" : "send", seq,
				     wc_status_name(wc[i].status));
				atomic_fetch_add(&errors, 1);
			} else if (recv) {
				on_recv(s, seq, &wc[i]);
			} else {
				atomic_fetch_add(&s->sends_done, 1);
			}
		}
		*mine += n;
		if (atomic_fetch_add(&total, n) + n >= want || now_us() > deadline)
			atomic_store(&stop, 1);
	}
	return NULL;
}

/* A sender: M SENDs on its own QP, at most SQ_DEPTH outstanding. Only this thread
 * posts to this QP, so the QP's lock is never contended. */
static void *sender(void *arg)
{
	struct sender *s = arg;
	int seq;

	for (seq = 0; seq < M; seq++) {
		/* The pollers count completions in the CQ's order, which is this QP's
		 * order: sends_done == k means SENDs 0..k-1 are done, their slots free. */
		while (seq - atomic_load(&s->sends_done) >= SQ_DEPTH) {
			if (now_us() > deadline || atomic_load(&errors)) {
				FAIL("thread %d: SEND %d never got a free slot", s->t, seq);
				return NULL;
			}
			sched_yield();
		}
		memset(send_slot(s, seq), 0, MSG);
		snprintf(send_slot(s, seq), MSG, "thread %d message %d", s->t, seq);
		if (post_one(s->l.qp[0], IBV_WR_SEND, s->mr, send_slot(s, seq), MSG, 0, 0,
			     wr_id(s->t, 0, seq))) {
			atomic_fetch_add(&errors, 1);
			return NULL;
		}
		s->posted++;
	}
	return NULL;
}

/* Thread and parent domains: ask, and say what the device answered. */
static int domains(struct ibv_context *ctx, struct ibv_pd *pd)
{
	struct ibv_td_init_attr tda = { .comp_mask = 0 };
	struct ibv_parent_domain_init_attr pda;
	struct ibv_td *td;
	struct ibv_pd *parent;
	int err = 0;

	td = ibv_alloc_td(ctx, &tda);
	if (td)
		printf("thread domain: allocated\n");
	else
		printf("thread domain: ibv_alloc_td: %s (errno %d)\n", strerror(errno), errno);

	memset(&pda, 0, sizeof(pda));
	pda.pd = pd;
	pda.td = td; /* NULL when there is no thread domain: a parent domain alone */
	parent = ibv_alloc_parent_domain(ctx, &pda);
	if (!parent) {
		printf("parent domain: ibv_alloc_parent_domain: %s (errno %d)\n", strerror(errno),
		       errno);
	} else {
		/* A QP created in the parent domain: on mlx5 with a thread domain, its
		 * send and receive queues have no lock, and it rings its own doorbell
		 * register (a dedicated UAR). The program must then post from one thread. */
		struct ibv_qp_init_attr init = { .send_cq = shared_cq, .recv_cq = shared_cq,
						 .qp_type = IBV_QPT_RC,
						 .cap = { .max_send_wr = 1, .max_recv_wr = 1,
							  .max_send_sge = 1, .max_recv_sge = 1 } };
		struct ibv_qp *qp = ibv_create_qp(parent, &init);

		printf("parent domain: allocated%s; a QP in it: %s\n",
		       td ? " with the thread domain" : "", qp ? "created" : strerror(errno));
		if (qp && ibv_destroy_qp(qp))
			err = -1;
		if (ibv_dealloc_pd(parent)) /* a parent domain is freed as a PD */
			err = -1;
	}
	if (td && ibv_dealloc_td(td))
		err = -1;
	return err;
}

static int setup_sender(struct sender *s, struct ibv_context *ctx, struct ibv_pd *pd,
			uint8_t port, const struct ibv_port_attr *pa, int gid_index,
			const union ibv_gid *gid)
{
	struct ibv_qp_init_attr init;
	size_t len = (size_t)(SQ_DEPTH + M) * MSG;
	int i, seq;

	s->l.ctx = ctx;
	s->l.pd = pd;
	s->l.port = port;
	s->l.retry_cnt = 7; /* what loop_open() sets; qp_connect() uses it */
	s->l.pa = *pa;
	s->l.gid_index = gid_index;
	s->l.gid = *gid;
	s->l.cq[0] = s->l.cq[1] = shared_cq; /* everyone's completions in one CQ */
	s->buf = calloc(1, len);
	s->seen = calloc((size_t)M, sizeof(*s->seen));
	if (!s->buf || !s->seen) {
		FAIL("out of memory");
		return -1;
	}
	s->mr = ibv_reg_mr(pd, s->buf, len, IBV_ACCESS_LOCAL_WRITE);
	if (!s->mr) {
		FAIL("ibv_reg_mr: %s", strerror(errno));
		return -1;
	}
	for (i = 0; i < 2; i++) {
		memset(&init, 0, sizeof(init));
		init.send_cq = shared_cq;
		init.recv_cq = shared_cq;
		init.qp_type = IBV_QPT_RC;
		init.sq_sig_all = 1;
		init.cap.max_send_wr = SQ_DEPTH;
		init.cap.max_recv_wr = (uint32_t)M; /* every receive posted up front */
		init.cap.max_send_sge = 1;
		init.cap.max_recv_sge = 1;
		s->l.qp[i] = ibv_create_qp(pd, &init);
		if (!s->l.qp[i]) {
			FAIL("ibv_create_qp: %s", strerror(errno));
			return -1;
		}
	}
	/* A may SEND to B, nothing one-sided: no remote access granted either way. */
	if (loop_connect(&s->l, 0, 0, LAB_RNR_RETRY))
		return -1;
	for (seq = 0; seq < M; seq++)
		if (post_recv_one(s->l.qp[1], s->mr, recv_slot(s, seq), MSG, wr_id(s->t, 1, seq)))
			return -1;
	return 0;
}

int main(int argc, char **argv)
{
	const char *dev = NULL;
	struct ibv_context *ctx;
	struct ibv_pd *pd = NULL;
	struct ibv_port_attr pa;
	union ibv_gid gid;
	pthread_t st[MAX_T], pt[MAX_P];
	long took[MAX_P] = { 0 };
	long sends = 0, recvs = 0, late = 0, sum = 0;
	int opt, i, gid_index, cqe, ret = 1, started_s = 0, started_p = 0;

	while ((opt = getopt(argc, argv, "t:p:m:")) != -1) {
		switch (opt) {
		case 't': T = atoi(optarg); break;
		case 'p': P = atoi(optarg); break;
		case 'm': M = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s [device] [-t senders] [-p pollers] [-m messages]\n",
				argv[0]);
			return 2;
		}
	}
	if (optind < argc)
		dev = argv[optind];
	if (T < 1 || T > MAX_T || P < 1 || P > MAX_P || M < 1 || M > 100000) {
		FAIL("-t 1..%d, -p 1..%d, -m 1..100000", MAX_T, MAX_P);
		return 2;
	}
	ctx = open_device(dev);
	if (!ctx)
		return 1;
	if (ibv_query_port(ctx, 1, &pa) || pa.state != IBV_PORT_ACTIVE) {
		FAIL("port 1 is not ACTIVE");
		goto out;
	}
	if (pick_gid(ctx, 1, lab_netdev(), &gid_index, &gid))
		goto out;
	pd = ibv_alloc_pd(ctx);
	/* Room for every completion that can be outstanding at once: per sender SQ_DEPTH
	 * SENDs and M receives. A CQ that overflows is an error for every QP on it. */
	cqe = T * (SQ_DEPTH + M);
	shared_cq = pd ? ibv_create_cq(ctx, cqe, NULL, NULL, 0) : NULL;
	if (!shared_cq) {
		FAIL("PD or CQ of %d entries: %s", cqe, strerror(errno));
		goto out;
	}
	printf("device %s: one PD, one CQ of %d entries\n", ibv_get_device_name(ctx->device),
	       shared_cq->cqe);
	if (domains(ctx, pd))
		goto out;

	for (i = 0; i < T; i++) {
		S[i].t = i;
		atomic_init(&S[i].last_seq, -1);
		if (setup_sender(&S[i], ctx, pd, 1, &pa, gid_index, &gid))
			goto out;
	}
	printf("%d sender threads, one RC QP pair each, %d SENDs of %d bytes each, at most %d "
	       "in flight per thread; %d pollers on the one CQ\n",
	       T, M, MSG, SQ_DEPTH, P);

	deadline = now_us() + 60e6;
	for (; started_p < P; started_p++)
		if (pthread_create(&pt[started_p], NULL, poller, &took[started_p])) {
			FAIL("pthread_create");
			atomic_store(&stop, 1);
			break;
		}
	for (; started_s < T && !atomic_load(&stop); started_s++)
		if (pthread_create(&st[started_s], NULL, sender, &S[started_s])) {
			FAIL("pthread_create");
			atomic_store(&stop, 1);
			break;
		}
	for (i = 0; i < started_s; i++)
		pthread_join(st[i], NULL);
	for (i = 0; i < started_p; i++)
		pthread_join(pt[i], NULL);

	for (i = 0; i < P; i++) {
		printf("poller %d took %ld completions\n", i, took[i]);
		sum += took[i];
	}
	for (i = 0; i < T; i++) {
		sends += atomic_load(&S[i].sends_done);
		recvs += atomic_load(&S[i].recvs_done);
		late += atomic_load(&S[i].handled_late);
	}
	printf("pollers: %ld completions between them, %ld expected\n", sum, 2L * T * M);
	printf("senders: %ld SENDs completed, %ld receives completed, each once with its "
	       "payload\n",
	       sends, recvs);
	printf("receives handled out of their QP's order by racing pollers: %ld\n", late);
	if (started_s == T && started_p == P && !atomic_load(&errors) && sum == 2L * T * M &&
	    sends == (long)T * M && recvs == (long)T * M)
		ret = 0;
	else
		FAIL("%d errors; not every completion arrived exactly once",
		     atomic_load(&errors));
out:
	/* Children before parents; the CQ once no QP uses it. */
	for (i = 0; i < T; i++) {
		int q;

		for (q = 0; q < 2; q++)
			if (S[i].l.qp[q] && ibv_destroy_qp(S[i].l.qp[q]))
				ret = 1;
		if (S[i].mr && ibv_dereg_mr(S[i].mr))
			ret = 1;
		free(S[i].buf);
		free(S[i].seen);
	}
	if (shared_cq && ibv_destroy_cq(shared_cq))
		ret = 1;
	if (pd && ibv_dealloc_pd(pd))
		ret = 1;
	if (ibv_close_device(ctx))
		ret = 1;
	if (ret == 0)
		printf("OK\n");
	return ret;
}
