"""Kernels that poison the process they are imported into (issue 13: goldens computed where no
kernel runs).  Each computes the right answer with the reference kernel; the harm is what its
import leaves behind for any golden computed later in the same process."""
