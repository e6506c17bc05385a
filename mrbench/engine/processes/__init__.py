"""The processes a cell computes in: intra-op threads, the CPU allocator, which GPUs each process
sees, FSDP on the CPU, and multi-process cells (ranks started by ``accelerate launch`` or forked
from the sweep's worker), one rank's failure stopping the others."""
