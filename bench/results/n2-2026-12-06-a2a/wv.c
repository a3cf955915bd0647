#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <stdatomic.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
typedef struct { _Atomic long bar; long pid[2]; uintptr_t snd[2], rcv[2]; } shared_t;
static shared_t *sh; static long gen;
static void barrier(void){ long g=++gen; atomic_fetch_add(&sh->bar,1); while(atomic_load(&sh->bar) < 2*g) ; }
static char *alloc(size_t n){ char *p=mmap(NULL,n+8192,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0); p+=16; madvise(p-16,n+8192,MADV_NOHUGEPAGE); memset(p,1,n); return p; }
static void rw(pid_t pid, char *loc, uintptr_t rem, size_t n, int w){
  while(n){ struct iovec l={loc,n}, r={(void*)rem,n}; ssize_t g= w? process_vm_writev(pid,&l,1,&r,1,0) : process_vm_readv(pid,&l,1,&r,1,0); if(g<=0){perror("rw");exit(1);} loc+=g; rem+=g; n-=g;} }
int main(int argc,char**argv){
  size_t S = strtoul(argv[1],0,0), B=S/2; int iters=atoi(argv[2]); int touch = argc>3 ? atoi(argv[3]) : 0;
  sh=mmap(NULL,4096,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);
  int me = fork()==0 ? 1 : 0, pe=1-me;
  char *snd=alloc(S), *rcv=alloc(S);
  sh->pid[me]=getpid(); sh->snd[me]=(uintptr_t)snd; sh->rcv[me]=(uintptr_t)rcv; barrier();
  pid_t peer=sh->pid[pe];
  const char *names[]={"A memcpy, readv","B readv, memcpy","W writev, memcpy","W2 memcpy, writev"};
  int nv=4; double *t=calloc(nv*iters,sizeof(double));
  for(int i=0;i<iters;i++) for(int vv=0;vv<nv;vv++){ int v=(vv+i)%nv;
    if(touch) memset(snd, i+v, S);   /* the application just wrote its send buffer */
    barrier(); double a=now();
    switch(v){
    case 0: memcpy(rcv+me*B,snd+me*B,B); rw(peer,rcv+pe*B,sh->snd[pe]+me*B,B,0); break;
    case 1: rw(peer,rcv+pe*B,sh->snd[pe]+me*B,B,0); memcpy(rcv+me*B,snd+me*B,B); break;
    case 2: rw(peer,snd+pe*B,sh->rcv[pe]+me*B,B,1); memcpy(rcv+me*B,snd+me*B,B); break;
    case 3: memcpy(rcv+me*B,snd+me*B,B); rw(peer,snd+pe*B,sh->rcv[pe]+me*B,B,1); break;
    }
    barrier();
    t[v*iters+i]=now()-a; }
  barrier();
  if(me==0){ for(int v=0;v<nv;v++){ double *x=t+v*iters; for(int i=0;i<iters;i++)for(int j=i+1;j<iters;j++) if(x[j]<x[i]){double q=x[i];x[i]=x[j];x[j]=q;}
    printf("%-20s S=%zu touch=%d p10 %.1f med %.1f us\n",names[v],S,touch,x[iters/10],x[iters/2]);} } else _exit(0);
  wait(NULL); return 0; }
