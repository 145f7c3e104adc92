package main

// Asynchronous events (ibv_get_async_event, ibv_ack_async_event): the C side.
//
// Each open context has a queue of events and a pipe whose read end is
// context->async_fd, a real file descriptor that poll(), epoll and O_NONBLOCK
// work on as on the kernel's async event file. The pipe holds one byte while
// the queue holds events, none while it is empty, so the fd is readable exactly
// when ibv_get_async_event has an event to return. The events themselves stay
// in the queue, not in the pipe, so that destroying a QP, CQ or SRQ can drop
// the events not yet read that name it (as the kernel's
// ib_uverbs_release_uevent does) and no event hands the program a freed
// object. The Go side (async.go) pushes the engine's events with
// sr_async_push; the verbs that create and destroy objects call
// sr_async_watch and sr_async_forget. As rdma-core's destroy verbs do,
// sr_async_forget waits until the program has acknowledged every event it was
// given for the object.

/*
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

extern void sr_debug(const char *format, ...);

enum { SR_OBJ_QP = 1, SR_OBJ_CQ = 2, SR_OBJ_SRQ = 3 };

struct sr_aev {
	struct sr_aev *next;
	struct ibv_async_event ev;
};

// sr_watch is an object events may name, with the count of its events the
// program has read (rdma-core's events_reported).
struct sr_watch {
	struct sr_watch *next;
	void *obj;
	int kind;
	uint32_t reported;
};

struct sr_async {
	struct sr_async *next;
	struct ibv_context *ctx;
	int wfd;
	pthread_mutex_t mu;
	struct sr_aev *head, *tail;
	struct sr_watch *watched;
};

static pthread_mutex_t sr_async_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sr_async *sr_asyncs;

static struct sr_async *sr_async_of(struct ibv_context *ctx)
{
	pthread_mutex_lock(&sr_async_mu);
	struct sr_async *a = sr_asyncs;
	while (a && a->ctx != ctx)
		a = a->next;
	pthread_mutex_unlock(&sr_async_mu);
	return a;
}

// sr_async_open gives ctx its event queue and async_fd; 0 or an errno.
int sr_async_open(struct ibv_context *ctx)
{
	struct sr_async *a = calloc(1, sizeof(*a));
	if (!a)
		return ENOMEM;
	int fds[2];
	if (pipe2(fds, O_CLOEXEC)) {
		int e = errno;
		free(a);
		return e;
	}
	a->ctx = ctx;
	a->wfd = fds[1];
	pthread_mutex_init(&a->mu, NULL);
	ctx->async_fd = fds[0];
	pthread_mutex_lock(&sr_async_mu);
	a->next = sr_asyncs;
	sr_asyncs = a;
	pthread_mutex_unlock(&sr_async_mu);
	return 0;
}

// sr_async_close frees ctx's queue and closes async_fd.
void sr_async_close(struct ibv_context *ctx)
{
	pthread_mutex_lock(&sr_async_mu);
	struct sr_async **p = &sr_asyncs;
	while (*p && (*p)->ctx != ctx)
		p = &(*p)->next;
	struct sr_async *a = *p;
	if (a)
		*p = a->next;
	pthread_mutex_unlock(&sr_async_mu);
	if (!a)
		return;
	while (a->head) {
		struct sr_aev *e = a->head;
		a->head = e->next;
		free(e);
	}
	while (a->watched) {
		struct sr_watch *w = a->watched;
		a->watched = w->next;
		free(w);
	}
	close(ctx->async_fd);
	close(a->wfd);
	ctx->async_fd = -1;
	pthread_mutex_destroy(&a->mu);
	free(a);
}

static struct ibv_context *sr_obj_context(void *obj, int kind)
{
	switch (kind) {
	case SR_OBJ_QP:
		return ((struct ibv_qp *)obj)->context;
	case SR_OBJ_CQ:
		return ((struct ibv_cq *)obj)->context;
	case SR_OBJ_SRQ:
		return ((struct ibv_srq *)obj)->context;
	}
	return NULL;
}

// sr_async_watch records obj (kind SR_OBJ_*) as one events may name.
void sr_async_watch(void *obj, int kind)
{
	struct sr_async *a = sr_async_of(sr_obj_context(obj, kind));
	struct sr_watch *w = calloc(1, sizeof(*w));
	if (!a || !w) {
		free(w);
		return;
	}
	w->obj = obj;
	w->kind = kind;
	pthread_mutex_lock(&a->mu);
	w->next = a->watched;
	a->watched = w;
	pthread_mutex_unlock(&a->mu);
}

static uint32_t sr_events_completed(void *obj, int kind)
{
	switch (kind) {
	case SR_OBJ_QP:
		return ((struct ibv_qp *)obj)->events_completed;
	case SR_OBJ_CQ:
		return ((struct ibv_cq *)obj)->async_events_completed;
	case SR_OBJ_SRQ:
		return ((struct ibv_srq *)obj)->events_completed;
	}
	return 0;
}

static void sr_obj_lock(void *obj, int kind, pthread_mutex_t **mu, pthread_cond_t **cond)
{
	switch (kind) {
	case SR_OBJ_QP:
		*mu = &((struct ibv_qp *)obj)->mutex, *cond = &((struct ibv_qp *)obj)->cond;
		break;
	case SR_OBJ_CQ:
		*mu = &((struct ibv_cq *)obj)->mutex, *cond = &((struct ibv_cq *)obj)->cond;
		break;
	default:
		*mu = &((struct ibv_srq *)obj)->mutex, *cond = &((struct ibv_srq *)obj)->cond;
	}
}

// sr_async_forget drops the unread events that name obj, stops watching it,
// and waits until the program has acknowledged each event it read for it, as
// rdma-core's ibv_destroy_qp/cq/srq wait for events_completed to reach the
// kernel's events_reported. The Go side has stopped pushing for obj before.
void sr_async_forget(void *obj, int kind)
{
	struct sr_async *a = sr_async_of(sr_obj_context(obj, kind));
	if (!a)
		return;
	uint32_t reported = 0;
	pthread_mutex_lock(&a->mu);
	int had = a->head != NULL;
	struct sr_aev **p = &a->head, *last = NULL;
	while (*p) {
		struct sr_aev *e = *p;
		if (e->ev.element.qp == obj) {
			*p = e->next;
			free(e);
			continue;
		}
		last = e;
		p = &e->next;
	}
	a->tail = last;
	if (had && !a->head) {
		// The queue emptied: take back its byte.
		char b;
		while (read(a->ctx->async_fd, &b, 1) < 0 && errno == EINTR)
			;
	}
	struct sr_watch **w = &a->watched;
	while (*w && (*w)->obj != obj)
		w = &(*w)->next;
	if (*w) {
		struct sr_watch *x = *w;
		reported = x->reported;
		*w = x->next;
		free(x);
	}
	pthread_mutex_unlock(&a->mu);
	pthread_mutex_t *mu;
	pthread_cond_t *cond;
	sr_obj_lock(obj, kind, &mu, &cond);
	pthread_mutex_lock(mu);
	while (sr_events_completed(obj, kind) < reported)
		pthread_cond_wait(cond, mu);
	pthread_mutex_unlock(mu);
}

// sr_async_push queues event type for obj (kind SR_OBJ_*), called by the Go
// side while obj is watched.
void sr_async_push(void *obj, int kind, int type)
{
	struct sr_async *a = sr_async_of(sr_obj_context(obj, kind));
	struct sr_aev *e = calloc(1, sizeof(*e));
	if (!a || !e) {
		free(e);
		return;
	}
	e->ev.event_type = type;
	switch (kind) {
	case SR_OBJ_QP:
		e->ev.element.qp = obj;
		break;
	case SR_OBJ_CQ:
		e->ev.element.cq = obj;
		break;
	default:
		e->ev.element.srq = obj;
	}
	pthread_mutex_lock(&a->mu);
	if (!a->head) {
		char b = 1;
		while (write(a->wfd, &b, 1) < 0 && errno == EINTR)
			;
		a->head = e;
	} else {
		a->tail->next = e;
	}
	a->tail = e;
	pthread_mutex_unlock(&a->mu);
}

// ibv_get_async_event returns the oldest event: at once if there is one, else
// -1 with EAGAIN when async_fd is non-blocking, else when one comes.
int ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *event)
{
	if (!ctx || !event) {
		errno = EINVAL;
		return -1;
	}
	struct sr_async *a = sr_async_of(ctx);
	if (!a) {
		sr_debug("get async event: the context has no event queue");
		errno = EINVAL;
		return -1;
	}
	for (;;) {
		pthread_mutex_lock(&a->mu);
		struct sr_aev *e = a->head;
		if (e) {
			a->head = e->next;
			if (!a->head) {
				a->tail = NULL;
				char b;
				while (read(ctx->async_fd, &b, 1) < 0 && errno == EINTR)
					;
			}
			for (struct sr_watch *w = a->watched; w; w = w->next)
				if (w->obj == e->ev.element.qp)
					w->reported++;
			pthread_mutex_unlock(&a->mu);
			*event = e->ev;
			free(e);
			return 0;
		}
		pthread_mutex_unlock(&a->mu);
		if (fcntl(ctx->async_fd, F_GETFL) & O_NONBLOCK) {
			errno = EAGAIN;
			return -1;
		}
		struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
		if (poll(&p, 1, -1) < 0 && errno != EINTR)
			return -1;
	}
}

// ibv_ack_async_event counts the event as handled on its object, which the
// destroy verbs wait for (rdma-core's verbs.c does the same).
void ibv_ack_async_event(struct ibv_async_event *event)
{
	if (!event)
		return;
	pthread_mutex_t *mu = NULL;
	pthread_cond_t *cond = NULL;
	uint32_t *n = NULL;
	switch (event->event_type) {
	case IBV_EVENT_CQ_ERR:
		if (!event->element.cq)
			return;
		mu = &event->element.cq->mutex, cond = &event->element.cq->cond;
		n = &event->element.cq->async_events_completed;
		break;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		if (!event->element.qp)
			return;
		mu = &event->element.qp->mutex, cond = &event->element.qp->cond;
		n = &event->element.qp->events_completed;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		if (!event->element.srq)
			return;
		mu = &event->element.srq->mutex, cond = &event->element.srq->cond;
		n = &event->element.srq->events_completed;
		break;
	default:
		return;
	}
	pthread_mutex_lock(mu);
	++*n;
	pthread_cond_signal(cond);
	pthread_mutex_unlock(mu);
}
*/
import "C"
