"""Fraction of a tensor's pages that are transparent huge pages (pagemap + kpageflags; root)."""
import os, struct
PAGE = 4096
def thp_fraction(ptr, nbytes, step_pages=64):
    fm = os.open("/proc/self/pagemap", os.O_RDONLY); fk = os.open("/proc/kpageflags", os.O_RDONLY)
    try:
        n = huge = 0
        first = ptr // PAGE; last = (ptr + nbytes - 1) // PAGE
        for vp in range(first, last + 1, step_pages):
            e = struct.unpack("Q", os.pread(fm, 8, vp * 8))[0]
            if not (e >> 63) & 1:
                continue
            pfn = e & ((1 << 55) - 1)
            flags = struct.unpack("Q", os.pread(fk, 8, pfn * 8))[0]
            n += 1
            huge += (flags >> 22) & 1
        return huge / n if n else None
    finally:
        os.close(fm); os.close(fk)
