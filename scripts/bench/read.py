"""Reads a file from start to end in 128 KiB reads, as `cat` does, and prints the
seconds from the open to the end of the file. Python's start-up is not timed, so
that small files are not measured by how fast a process starts.

usage: python3 bench_read.py FILE  ->  prints "<seconds> <bytes>"
"""
import os
import sys
import time


def main():
    buffer = memoryview(bytearray(128 << 10))
    start = time.perf_counter()
    fd = os.open(sys.argv[1], os.O_RDONLY)
    try:
        total = 0
        while n := os.readv(fd, [buffer]):
            total += n
    finally:
        os.close(fd)
    print(f"{time.perf_counter() - start:.6f} {total}")


if __name__ == "__main__":
    main()
