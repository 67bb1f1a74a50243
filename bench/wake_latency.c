/* wake_latency.c — how late a sleeping thread wakes on this machine now: N absolute clock_nanosleep waits
 * of US microseconds each; prints the median, p90, p99 and max lateness (bench/README.md, Replay).
 * cc -O2 -o /tmp/wake bench/wake_latency.c && nice /tmp/wake 300 1000 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return (x>y)-(x<y);}
int main(int argc,char**argv){int n=argc>1?atoi(argv[1]):300;double us=argc>2?atof(argv[2]):1000;double*o=malloc(sizeof(double)*n);
for(int i=0;i<n;i++){double t0=now(),w=t0+us*1e-6;struct timespec ts={(time_t)w,(long)((w-(time_t)w)*1e9)};clock_nanosleep(CLOCK_MONOTONIC,TIMER_ABSTIME,&ts,NULL);o[i]=(now()-w)*1e6;}
qsort(o,n,sizeof(double),cmp);printf("sleep %.0f us x %d: wake-up late by median %.0f us, p90 %.0f us, p99 %.0f us, max %.0f us\n",us,n,o[n/2],o[n*9/10],o[n*99/100],o[n-1]);}
