// reports/junit.h — DIR/junit.xml for CI systems, from the CSVs: a <testsuite> per (case,
// device), a <testcase> per config row of summary.csv and per check row of kernels.csv (plus one
// per negative-control op: a reference op that must vary somewhere). A FAIL row carries
// <failure message="..."> with its first divergence; a SKIP row <skipped message="..."> with
// its reason. Counts and times are on every suite and on <testsuites>.
#ifndef INVAR_REPORTS_JUNIT_H
#define INVAR_REPORTS_JUNIT_H

#include <stdbool.h>   // bool
#include <stdio.h>     // FILE

#include "csv_read.h"  // csv_table

// Writes `path` (temporary name, then rename) from the tables; any of them may be NULL.
// False with the file and the cause in err.
bool junit_write(const char *path, const csv_table *summary, const csv_table *kernels,
                 const csv_table *meta, char *err, int len);

// Writes s as XML character data or attribute value: & < > " ' escaped, tab/newline/CR as
// character references, other control characters (not allowed in XML 1.0) and bytes that are
// not UTF-8 as U+FFFD.
void junit_xml_escape(FILE *f, const char *s);

#endif
