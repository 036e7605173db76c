# Sourced by the scripts: run Open MPI's launcher as root if need be, keep its
# own traffic on loopback, and let ranks share this machine's two cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
