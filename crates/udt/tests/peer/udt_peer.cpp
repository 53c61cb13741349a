// Reference peer built on libudt 4.11, used by the interop tests to check
// that our UDT implementation talks to the real library in both directions.
//
//   udt_peer listen  <bind-ip> <port> send|recv <file> [options]
//   udt_peer connect <host-ip> <port> send|recv <file> [options]
//   options: --mss N --fc N --rcvbuf BYTES --sndbuf BYTES --timeout SECS
//
// A listener prints "port <N>" on stdout once it is listening (so port 0
// works). On success stderr gets "bytes=<n> seconds=<s> mbit_s=<rate>" and
// the exit status is 0; a UDT error exits 1, the --timeout watchdog exits 2.
//
// End of stream: libudt has no orderly EOF. The sender's close() lingers
// until everything is acknowledged, then sends one Shutdown packet. The
// receiver's recv() keeps returning buffered data and then fails with
// ECONNLOST (2001), as observed on loopback. Two other codes mean the same
// thing: ENOCONN (2002), and EINVSOCK (5004) when libudt's garbage collector
// (1 s cycle) has already marked the drained, broken socket CLOSED before the
// next recv(). A peer that times out gives the same ECONNLOST, so only
// comparing the received bytes tells a clean close from a lost peer.

#include <udt/udt.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include <vector>

static void on_alarm(int) {
  static const char msg[] = "udt_peer: timeout\n";
  ssize_t r = write(2, msg, sizeof msg - 1);
  (void)r;
  _exit(2);
}

static void usage() {
  fprintf(stderr,
          "usage: udt_peer listen|connect <ip> <port> send|recv <file> "
          "[--mss N] [--fc N] [--rcvbuf BYTES] [--sndbuf BYTES] "
          "[--timeout SECS]\n");
  exit(64);
}

static void fail(const char* where) {
  fprintf(stderr, "udt_peer: %s: %s\n", where,
          UDT::getlasterror().getErrorMessage());
  exit(1);
}

static double now() {
  timeval tv;
  gettimeofday(&tv, NULL);
  return tv.tv_sec + tv.tv_usec / 1e6;
}

static void set_opt(UDTSOCKET s, UDT::SOCKOPT opt, int value, const char* where) {
  if (value > 0 && UDT::setsockopt(s, 0, opt, &value, sizeof value) == UDT::ERROR)
    fail(where);
}

int main(int argc, char** argv) {
  if (argc < 6) usage();
  const char* mode = argv[1];
  const char* ip = argv[2];
  int port = atoi(argv[3]);
  const char* dir = argv[4];
  const char* path = argv[5];
  bool listening = strcmp(mode, "listen") == 0;
  bool sending = strcmp(dir, "send") == 0;
  if ((!listening && strcmp(mode, "connect") != 0) ||
      (!sending && strcmp(dir, "recv") != 0))
    usage();

  int mss = 0, fc = 0, rcvbuf = 0, sndbuf = 0, timeout = 120;
  for (int i = 6; i < argc; i += 2) {
    if (i + 1 >= argc) usage();
    int v = atoi(argv[i + 1]);
    if (strcmp(argv[i], "--mss") == 0) mss = v;
    else if (strcmp(argv[i], "--fc") == 0) fc = v;
    else if (strcmp(argv[i], "--rcvbuf") == 0) rcvbuf = v;
    else if (strcmp(argv[i], "--sndbuf") == 0) sndbuf = v;
    else if (strcmp(argv[i], "--timeout") == 0) timeout = v;
    else usage();
  }

  signal(SIGALRM, on_alarm);
  alarm(timeout);

  sockaddr_storage addr;
  memset(&addr, 0, sizeof addr);
  socklen_t addrlen;
  int af;
  sockaddr_in* a4 = (sockaddr_in*)&addr;
  sockaddr_in6* a6 = (sockaddr_in6*)&addr;
  if (inet_pton(AF_INET, ip, &a4->sin_addr) == 1) {
    af = a4->sin_family = AF_INET;
    a4->sin_port = htons(port);
    addrlen = sizeof *a4;
  } else if (inet_pton(AF_INET6, ip, &a6->sin6_addr) == 1) {
    af = a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(port);
    addrlen = sizeof *a6;
  } else {
    fprintf(stderr, "udt_peer: bad ip address %s\n", ip);
    return 64;
  }

  FILE* file = fopen(path, sending ? "rb" : "wb");
  if (!file) {
    perror(path);
    return 1;
  }

  UDT::startup();
  UDTSOCKET sock = UDT::socket(af, SOCK_STREAM, 0);
  if (sock == UDT::INVALID_SOCK) fail("socket");
  // Order matters: libudt converts RCVBUF/SNDBUF bytes into packets using the
  // current MSS, and clamps RCVBUF to FC.
  set_opt(sock, UDT_MSS, mss, "setsockopt UDT_MSS");
  set_opt(sock, UDT_FC, fc, "setsockopt UDT_FC");
  set_opt(sock, UDT_RCVBUF, rcvbuf, "setsockopt UDT_RCVBUF");
  set_opt(sock, UDT_SNDBUF, sndbuf, "setsockopt UDT_SNDBUF");

  UDTSOCKET conn;
  if (listening) {
    if (UDT::bind(sock, (sockaddr*)&addr, addrlen) == UDT::ERROR) fail("bind");
    if (UDT::listen(sock, 1) == UDT::ERROR) fail("listen");
    int len = sizeof addr;
    if (UDT::getsockname(sock, (sockaddr*)&addr, &len) == UDT::ERROR)
      fail("getsockname");
    printf("port %d\n", ntohs(af == AF_INET ? a4->sin_port : a6->sin6_port));
    fflush(stdout);
    sockaddr_storage peer;
    len = sizeof peer;
    conn = UDT::accept(sock, (sockaddr*)&peer, &len);
    if (conn == UDT::INVALID_SOCK) fail("accept");
  } else {
    if (UDT::connect(sock, (sockaddr*)&addr, addrlen) == UDT::ERROR)
      fail("connect");
    conn = sock;
  }

  std::vector<char> buf(1 << 20);
  long long total = 0;
  double start = now();
  if (sending) {
    size_t n;
    while ((n = fread(&buf[0], 1, buf.size(), file)) > 0) {
      for (size_t off = 0; off < n;) {
        int r = UDT::send(conn, &buf[off], int(n - off), 0);
        if (r == UDT::ERROR) fail("send");
        off += r;
      }
      total += n;
    }
    if (ferror(file)) {
      perror(path);
      return 1;
    }
    // Default linger (180 s): close() returns once the peer acknowledged all.
    if (UDT::close(conn) == UDT::ERROR) fail("close");
  } else {
    for (;;) {
      int r = UDT::recv(conn, &buf[0], int(buf.size()), 0);
      if (r == UDT::ERROR) {
        int code = UDT::getlasterror().getErrorCode();
        if (code == CUDTException::ECONNLOST || code == CUDTException::ENOCONN ||
            code == CUDTException::EINVSOCK)
          break;
        fail("recv");
      }
      if (fwrite(&buf[0], 1, r, file) != size_t(r)) {
        perror(path);
        return 1;
      }
      total += r;
    }
    // The connection is already gone; close() may report EINVSOCK.
    UDT::close(conn);
  }
  double secs = now() - start;

  if (fclose(file) != 0) {
    perror(path);
    return 1;
  }
  if (listening) UDT::close(sock);
  UDT::cleanup();

  fprintf(stderr, "bytes=%lld seconds=%.3f mbit_s=%.1f\n", total, secs,
          secs > 0 ? total * 8 / secs / 1e6 : 0.0);
  return 0;
}
