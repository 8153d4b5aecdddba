"""small_rcvbuf.py PORT [RCVBUF]: a TCP client to 127.0.0.1:PORT with a
small receive buffer (SO_RCVBUF, 16 KiB unless told, set before connect so
that the window it offers is small from the SYN), driven line by line on
stdin by a test (node cannot set SO_RCVBUF: its kernel autotunes the buffer
up to megabytes, and takes a large answer ahead of a client that means to
read it slowly; what it has not read must stay in the server's socket, as
a slow reader's does on a real network).

It says 'port LOCALPORT' once connected, then answers each command with
one line:
  send HEX   sends the bytes                       -> 'ok'
  read N     up to N bytes of what has come, not   -> 'data HEX' (maybe
             waiting for more                          empty), 'end' at the
                                                       peer's end, 'error
                                                       ECONNRESET' etc.
  shut       ends its side (SHUT_WR)               -> 'ok'
  close      closes the socket, and exits          -> 'ok'
A line that is not a command: 'error bad command'. At stdin's end it
closes the socket and exits.
"""
import errno
import socket
import sys

port = int(sys.argv[1])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, int(sys.argv[2]) if len(sys.argv) > 2 else 16384)
s.connect(('127.0.0.1', port))
s.setblocking(False)
out = sys.stdout


def say(line):
    out.write(line + '\n')
    out.flush()


say('port %d' % s.getsockname()[1])
ended = False
for line in sys.stdin:
    cmd, _, arg = line.strip().partition(' ')
    try:
        if cmd == 'send':
            s.setblocking(True)
            s.sendall(bytes.fromhex(arg))
            s.setblocking(False)
            say('ok')
        elif cmd == 'read':
            want, got = int(arg), b''
            while not ended and len(got) < want:
                try:
                    b = s.recv(want - len(got))
                except BlockingIOError:
                    break
                if not b:
                    ended = True
                got += b
            say('data ' + got.hex() if got or not ended else 'end')
        elif cmd == 'shut':
            s.shutdown(socket.SHUT_WR)
            say('ok')
        elif cmd == 'close':
            s.close()
            say('ok')
            break
        else:
            say('error bad command')
    except OSError as e:
        say('error ' + errno.errorcode.get(e.errno, str(e).replace('\n', ' ')))
s.close()
