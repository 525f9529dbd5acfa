// netns_delay: holds every packet of NFQUEUE queue Q, in each of the given network namespaces,
// for MS milliseconds before accepting it. tools/netns_cluster.sh runs it for `up --delay` where
// the kernel has no netem qdisc (one process in the root namespace serves all hosts).
//
//   netns_delay --delay MS [--queue Q] /run/netns/NAME...
//
// Prints "netns_delay: ready" on standard error once every queue is bound (packets queued before
// then would be dropped), then runs until SIGTERM or SIGINT.
//
// The delay is the same for every packet, so a FIFO per queue keeps the order and its head is
// always the next one due. Only the packet id is copied to user space (NFQNL_COPY_META), GSO
// packets are queued whole (NFQA_CFG_F_GSO), and one batch verdict accepts every due packet, so
// that the rate in packets per second stays low even at Gbit/s.
//
// Build: cc -O2 -Wall tools/netns_delay.c -lnetfilter_queue -o netns_delay
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <linux/netlink.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

enum { kQueueMaxLen = 65536, kSocketBuffer = 16 << 20 };

typedef struct {
  int64_t due_ns;
  uint32_t id;
} Held;

// One bound queue in one namespace, with the packets it holds in arrival order.
typedef struct {
  const char* netns;
  struct nfq_handle* h;
  struct nfq_q_handle* qh;
  int fd;
  Held* fifo;
  size_t cap, head, count;  // ring buffer
} Queue;

static int64_t g_delay_ns;
static int64_t g_now_ns;  // the arrival time given to the packets of the batch being read
static volatile sig_atomic_t g_stop;

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void die(const char* what, const char* netns) {
  fprintf(stderr, "netns_delay: error: %s%s%s: %s\n", what, netns ? " in " : "", netns ? netns : "",
          strerror(errno));
  exit(1);
}

static void push(Queue* q, uint32_t id) {
  if (q->count == q->cap) {  // grow, unwrapping the ring
    size_t cap = q->cap ? 2 * q->cap : 4096;
    Held* fifo = malloc(cap * sizeof *fifo);
    if (!fifo) die("out of memory", NULL);
    for (size_t i = 0; i < q->count; ++i) fifo[i] = q->fifo[(q->head + i) % q->cap];
    free(q->fifo);
    q->fifo = fifo, q->cap = cap, q->head = 0;
  }
  q->fifo[(q->head + q->count) % q->cap] = (Held){g_now_ns + g_delay_ns, id};
  ++q->count;
}

static int on_packet(struct nfq_q_handle* qh, struct nfgenmsg* msg, struct nfq_data* nfa,
                     void* data) {
  (void)qh, (void)msg;
  struct nfqnl_msg_packet_hdr* ph = nfq_get_msg_packet_hdr(nfa);
  if (ph) push((Queue*)data, ntohl(ph->packet_id));
  return 0;
}

// Accepts the packets that are due (ids are in order, so one verdict for the last covers them).
static void release_due(Queue* q, int64_t now) {
  uint32_t last = 0;
  int any = 0;
  while (q->count && q->fifo[q->head].due_ns <= now) {
    last = q->fifo[q->head].id, any = 1;
    q->head = (q->head + 1) % q->cap, --q->count;
  }
  if (any && nfq_set_verdict_batch(q->qh, last, NF_ACCEPT) < 0)
    fprintf(stderr, "netns_delay: verdict in %s: %s\n", q->netns, strerror(errno));
}

// Binds queue `num` in the namespace at path: the netlink socket belongs to the namespace it was
// made in, so this process enters it, makes the socket, and goes back.
static void bind_queue(Queue* q, const char* path, uint16_t num, int home) {
  q->netns = path;
  int ns = open(path, O_RDONLY | O_CLOEXEC);
  if (ns < 0) die("open", path);
  if (setns(ns, CLONE_NEWNET) < 0) die("setns", path);
  close(ns);
  q->h = nfq_open();
  if (!q->h) die("nfq_open", path);
  q->qh = nfq_create_queue(q->h, num, on_packet, q);
  if (!q->qh) die("binding the queue (is another program bound to it?)", path);
  if (nfq_set_mode(q->qh, NFQNL_COPY_META, 0) < 0) die("nfq_set_mode", path);
  if (nfq_set_queue_maxlen(q->qh, kQueueMaxLen) < 0) die("nfq_set_queue_maxlen", path);
  // Older kernels lack F_GSO; they then queue segments, which is slower but still right.
  nfq_set_queue_flags(q->qh, NFQA_CFG_F_GSO, NFQA_CFG_F_GSO);
  q->fd = nfq_fd(q->h);
  int size = kSocketBuffer, one = 1;
  if (setsockopt(q->fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size) < 0)
    setsockopt(q->fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);  // capped without CAP_NET_ADMIN
  // A message lost to a full buffer costs nothing lasting: the next batch verdict covers its id.
  setsockopt(q->fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof one);
  fcntl(q->fd, F_SETFL, fcntl(q->fd, F_GETFL) | O_NONBLOCK);
  if (setns(home, CLONE_NEWNET) < 0) die("setns back", NULL);
}

static void on_signal(int sig) {
  (void)sig;
  g_stop = 1;
}

static void usage(void) {
  fprintf(stderr, "usage: netns_delay --delay MS [--queue Q] NETNS_PATH...\n");
  exit(2);
}

int main(int argc, char** argv) {
  double delay_ms = -1;
  long num = 0;
  int first = 1;
  for (; first < argc && strncmp(argv[first], "--", 2) == 0; first += 2) {
    if (first + 1 >= argc) usage();
    if (strcmp(argv[first], "--delay") == 0)
      delay_ms = atof(argv[first + 1]);
    else if (strcmp(argv[first], "--queue") == 0)
      num = strtol(argv[first + 1], NULL, 10);
    else
      usage();
  }
  if (delay_ms < 0 || num < 0 || num > 65535 || first >= argc) usage();
  g_delay_ns = (int64_t)(delay_ms * 1e6);

  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);

  const int n = argc - first;
  Queue* queues = calloc((size_t)n, sizeof *queues);
  int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  int timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (!queues || home < 0 || ep < 0 || timer < 0) die("setting up", NULL);
  struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)n};  // n: the timer
  epoll_ctl(ep, EPOLL_CTL_ADD, timer, &ev);
  for (int i = 0; i < n; ++i) {
    bind_queue(&queues[i], argv[first + i], (uint16_t)num, home);
    ev.data.u32 = (uint32_t)i;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, queues[i].fd, &ev) < 0) die("epoll_ctl", argv[first + i]);
  }
  fprintf(stderr, "netns_delay: ready\n");

  static char buf[1 << 16];
  while (!g_stop) {
    struct epoll_event events[16];
    int k = epoll_wait(ep, events, 16, -1);
    if (k < 0 && errno != EINTR) die("epoll_wait", NULL);
    for (int e = 0; e < k; ++e) {
      if (events[e].data.u32 == (uint32_t)n) {
        uint64_t ticks;
        while (read(timer, &ticks, sizeof ticks) > 0) {
        }
        continue;
      }
      // A bounded number of reads, so that a flood cannot hold back the releases below.
      Queue* q = &queues[events[e].data.u32];
      for (int m = 0; m < 256; ++m) {
        ssize_t len = recv(q->fd, buf, sizeof buf, 0);
        if (len < 0) {
          if (errno == EAGAIN || errno == EWOULDBLOCK) break;
          if (errno == EINTR || errno == ENOBUFS) continue;
          die("recv", q->netns);
        }
        g_now_ns = now_ns();
        nfq_handle_packet(q->h, buf, (int)len);
      }
    }
    // Release what is due, then sleep until the next packet anywhere is due.
    int64_t now = now_ns(), next = INT64_MAX;
    for (int i = 0; i < n; ++i) {
      release_due(&queues[i], now);
      if (queues[i].count && queues[i].fifo[queues[i].head].due_ns < next)
        next = queues[i].fifo[queues[i].head].due_ns;
    }
    struct itimerspec at = {0};  // all zero: disarmed
    if (next != INT64_MAX) {
      at.it_value.tv_sec = next / 1000000000;
      at.it_value.tv_nsec = next % 1000000000;
    }
    timerfd_settime(timer, TFD_TIMER_ABSTIME, &at, NULL);
  }
  // Closing the sockets drops what is still held; the caller removes the queue rules first.
  for (int i = 0; i < n; ++i) {
    nfq_destroy_queue(queues[i].qh);
    nfq_close(queues[i].h);
  }
  return 0;
}
