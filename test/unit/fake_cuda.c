/* A library named libcuda.so.1 with none of the driver's entry points:
 * test_memkind loads it to stand for a process that has loaded the driver. */
int ofccl_fake_cuda_marker(void);
int ofccl_fake_cuda_marker(void)
{
    return 1;
}
