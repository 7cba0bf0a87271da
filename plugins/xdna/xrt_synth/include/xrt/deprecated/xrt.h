/*
 * xrt/deprecated/xrt.h (synthetic XRT) - the C enums of XRT's xrt.h that the
 * C++ API uses, with XRT's names and values. Part of the synthetic runtime
 * (plugins/xdna/xrt_synth): tests only, never a real device.
 */
#ifndef COLI_XRT_SYNTH_XRT_H
#define COLI_XRT_SYNTH_XRT_H

#include <stdint.h>

typedef void *xclDeviceHandle;

enum xclBOSyncDirection {
    XCL_BO_SYNC_BO_TO_DEVICE = 0,
    XCL_BO_SYNC_BO_FROM_DEVICE,
    XCL_BO_SYNC_BO_GMIO_TO_AIE,
    XCL_BO_SYNC_BO_AIE_TO_GMIO,
};

#endif
