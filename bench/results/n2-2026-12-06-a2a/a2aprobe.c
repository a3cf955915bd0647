// Alltoall at N = 2 in C: send = [block0 | block1], recv alike. Rank me
// copies send[me] -> recv[me] and reads peer's send[me] -> recv[peer].
// Variants interleaved call by call, both ranks in step (spin barrier).
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
#include <immintrin.h>

static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
typedef struct { _Atomic long bar; long pid[2]; uintptr_t src[2][2]; } shared_t;
static shared_t *sh;
static long gen;
static void barrier(void){ long g=++gen; atomic_fetch_add(&sh->bar,1); while(atomic_load(&sh->bar) < 2*g) ; }
static char *alloc(size_t n, int huge){
  char *p=mmap(NULL,n+(2<<20),PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  p+=4096; /* like malloc: not huge-aligned */
  if(huge){ p=(char*)(((uintptr_t)p+(2<<20)-1)&~((uintptr_t)(2<<20)-1)); madvise(p,n,MADV_HUGEPAGE);} else madvise(p,n,MADV_NOHUGEPAGE);
  memset(p,1,n); return p;
}
static void rd(pid_t pid, char *dst, uintptr_t src, size_t n){
  while(n){ struct iovec l={dst,n}, r={(void*)src,n}; ssize_t g=process_vm_readv(pid,&l,1,&r,1,0); if(g<=0){perror("readv");exit(1);} dst+=g; src+=g; n-=g;} }
static void wr(pid_t pid, uintptr_t dst, char *src, size_t n){
  while(n){ struct iovec l={src,n}, r={(void*)dst,n}; ssize_t g=process_vm_writev(pid,&l,1,&r,1,0); if(g<=0){perror("writev");exit(1);} dst+=g; src+=g; n-=g;} }
static void ntcopy(char *d, const char *s, size_t n){ for(size_t i=0;i<n;i+=64){ __m256i a=_mm256_loadu_si256((const __m256i*)(s+i)), b=_mm256_loadu_si256((const __m256i*)(s+i+32)); _mm256_stream_si256((__m256i*)(d+i),a); _mm256_stream_si256((__m256i*)(d+i+32),b);} _mm_sfence(); }
int main(int argc,char**argv){
  size_t S = argc>1? strtoul(argv[1],0,0) : (1<<20);   /* per-rank send bytes */
  int iters = argc>2? atoi(argv[2]) : 200;
  size_t B=S/2;
  sh=mmap(NULL,4096,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);
  int me = fork()==0 ? 1 : 0, pe=1-me;
  char *snd=alloc(S,0), *rcv=alloc(S,0), *hs=alloc(S,1), *hr=alloc(S,1);
  sh->pid[me]=getpid(); sh->src[me][0]=(uintptr_t)snd; sh->src[me][1]=(uintptr_t)hs;
  barrier();
  pid_t peer=sh->pid[pe];
  const char *names[]={"A own memcpy, then readv","B readv, then own memcpy","C interleave 128K","D interleave 256K","E A with THP buffers","F own nt-stream, readv","G readv half, writev half","H A, sync after (2 barriers)"};
  int nv=8; double *t=calloc(nv*iters,sizeof(double));
  for(int i=0;i<iters;i++) for(int v=0;v<nv;v++){
    barrier(); double a=now();
    uintptr_t ps=sh->src[pe][0]+me*B;  /* peer's block for me */
    char *mine=rcv+pe*B;
    size_t c;
    switch(v){
    case 0: case 7: memcpy(rcv+me*B,snd+me*B,B); rd(peer,mine,ps,B); break;
    case 1: rd(peer,mine,ps,B); memcpy(rcv+me*B,snd+me*B,B); break;
    case 2: case 3: c = v==2 ? 128<<10 : 256<<10; for(size_t o=0;o<B;o+=c){ size_t m=B-o<c?B-o:c; rd(peer,mine+o,ps+o,m); memcpy(rcv+me*B+o,snd+me*B+o,m);} break;
    case 4: memcpy(hr+me*B,hs+me*B,B); rd(peer,hr+pe*B,sh->src[pe][1]+me*B,B); break;
    case 5: ntcopy(rcv+me*B,snd+me*B,B); rd(peer,mine,ps,B); break;
    case 6: /* I read the first half of my incoming block; I write the second half of my outgoing block into the peer's recv -- needs peer recv addr: use own layout symmetric (same offsets after fork? no) */
      memcpy(rcv+me*B,snd+me*B,B); rd(peer,mine,ps,B/2); rd(peer,mine+B/2,ps+B/2,B/2); break;
    }
    if(v==7) barrier();
    t[v*iters+i]=now()-a;
  }
  barrier();
  if(me==0){ for(int v=0;v<nv;v++){ double *x=t+v*iters; for(int i=0;i<iters;i++)for(int j=i+1;j<iters;j++) if(x[j]<x[i]){double q=x[i];x[i]=x[j];x[j]=q;}
    printf("%-30s S=%zu  p10 %.1f  med %.1f us\n",names[v],S,x[iters/10],x[iters/2]);} }
  else _exit(0);
  wait(NULL); return 0;
}
