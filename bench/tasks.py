"""The non-durable peer: the same trivial steps as a plain Celery chain, one task per step."""

from celery import shared_task


@shared_task(name="bench.chain_step", ignore_result=False)
def chain_step(total: int, i: int) -> int:
    return total + i
