/* Layout of the buffer scans (gae, discounted_returns): PK_VW envs per vector (pk_vec.h), PK_NV
 * vectors per work-item, so each work-item owns PK_SCAN_ENVS consecutive envs of every row.
 *
 * Why: a GPU wants one env per work-item (a warp reads a row together), but a CPU driver runs the
 * work-items of a group one after another on one core, so one env per work-item walks every row
 * at a stride of N elements and touches a new page per access. A block of envs per work-item reads
 * each row as one contiguous run (the hardware prefetcher follows it) in explicit vectors (PoCL
 * does not vectorise a loop-carried recursion across work-items). Both are tuning knobs
 * (backend.scan_vector_width, backend.scan_vectors_per_item), never a device test.
 */
#ifndef PK_SCAN_H
#define PK_SCAN_H

#include "pk_vload.h"

#ifndef PK_NV
#define PK_NV 1
#endif
#define PK_SCAN_ENVS (PK_VW * PK_NV)

#if PK_VW == 1
#define PK_SCAN_LD(p) (*(p))
#define PK_SCAN_ST(v, p) (*(p) = (v))
#define PK_SCAN_KERNEL __kernel
/* A uchar flag as a mask of REAL's width (scalar: 1/0), and a pick by it. */
#define PK_SCAN_FLAG(p) PK_RMASK((int)(*(p) != (uchar)0))
#define PK_PICK(a, b, m) ((m) ? (b) : (a))
#else
#define PK_SCAN_LD(p) PK_VLD(REAL, PK_VW, p)
#define PK_SCAN_ST(v, p) PK_VST(PK_VW, v, p)
/* Already vectorised across envs: tells drivers that vectorise across work-items (Intel's) so. */
#define PK_SCAN_KERNEL __kernel __attribute__((vec_type_hint(RV)))
/* PK_VW uchar flags as a mask of REAL's width (-1/0 per lane). */
#define PK_SCAN_FLAG(p) PK_RMASK(PK_CONVERT(IV, PK_VLD(uchar, PK_VW, p)) != (IV)(0))
/* select(a, b, m) as bit operations: PoCL calls select() out of line (see pk_vload.h). */
#define PK_PICK(a, b, m) \
    PK_CAT(as_, RV)((PK_CAT(as_, MV)(a) & ~(m)) | (PK_CAT(as_, MV)(b) & (m)))
#endif

#endif
