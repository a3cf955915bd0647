// readv of B bytes from the peer: source THP or not, destination THP or not. Both ranks concurrently.
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
typedef struct { _Atomic long bar; long pid[2]; uintptr_t src[2][2]; } shared_t;
static shared_t *sh; static long gen;
static void barrier(void){ long g=++gen; atomic_fetch_add(&sh->bar,1); while(atomic_load(&sh->bar) < 2*g) ; }
static char *alloc(size_t n, int huge){
  char *p=mmap(NULL,n+(4<<20),PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  p=(char*)(((uintptr_t)p+(2<<20)-1)&~((uintptr_t)(2<<20)-1));
  madvise(p,n,huge?MADV_HUGEPAGE:MADV_NOHUGEPAGE); memset(p,1,n); return p; }
static void rd(pid_t pid, char *dst, uintptr_t src, size_t n){
  while(n){ struct iovec l={dst,n}, r={(void*)src,n}; ssize_t g=process_vm_readv(pid,&l,1,&r,1,0); if(g<=0){perror("readv");exit(1);} dst+=g; src+=g; n-=g;} }
int main(int argc,char**argv){
  size_t B = strtoul(argv[1],0,0); int iters=atoi(argv[2]);
  sh=mmap(NULL,4096,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);
  int me = fork()==0 ? 1 : 0, pe=1-me;
  char *s0=alloc(B,0), *s1=alloc(B,1), *d0=alloc(B,0), *d1=alloc(B,1);
  sh->pid[me]=getpid(); sh->src[me][0]=(uintptr_t)s0; sh->src[me][1]=(uintptr_t)s1; barrier();
  pid_t peer=sh->pid[pe];
  const char *names[]={"src 4K dst 4K","src THP dst 4K","src 4K dst THP","src THP dst THP","memcpy 4K->4K","memcpy THP->THP"};
  int nv=6; double *t=calloc(nv*iters,sizeof(double));
  for(int i=0;i<iters;i++) for(int vv=0;vv<nv;vv++){ int v=(vv+i)%nv; barrier(); double a=now();
    switch(v){case 0: rd(peer,d0,sh->src[pe][0],B); break; case 1: rd(peer,d0,sh->src[pe][1],B); break;
      case 2: rd(peer,d1,sh->src[pe][0],B); break; case 3: rd(peer,d1,sh->src[pe][1],B); break;
      case 4: memcpy(d0,s0,B); break; case 5: memcpy(d1,s1,B); break;}
    t[v*iters+i]=now()-a; }
  barrier();
  if(me==0){ FILE *f=fopen("/proc/self/smaps_rollup","r"); char l[256]; while(fgets(l,256,f)) if(strstr(l,"AnonHuge")) printf("%s",l);
    for(int v=0;v<nv;v++){ double *x=t+v*iters; for(int i=0;i<iters;i++)for(int j=i+1;j<iters;j++) if(x[j]<x[i]){double q=x[i];x[i]=x[j];x[j]=q;}
    printf("%-18s B=%zu p10 %.1f med %.1f us\n",names[v],B,x[iters/10],x[iters/2]);} } else _exit(0);
  wait(NULL); return 0; }
