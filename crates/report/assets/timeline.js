
(function(){
var L=200,R=1336,W=1360;
function num(e,a){return parseFloat(e.getAttribute(a));}
function all(root,sel){return Array.prototype.slice.call(root.querySelectorAll(sel));}
function step(span){var raw=Math.max(span/10,1e-3),i;
 if(raw>30000){var m=[1,2,5,10,15,30,60,120,240,480,1440];for(i=0;i<m.length;i++)if(m[i]*60000>=raw)return m[i]*60000;return 1440*60000;}
 var p=Math.pow(10,Math.floor(Math.log(raw)/Math.LN10)),k=[1,2,5,10];for(i=0;i<4;i++)if(k[i]*p>=raw)return k[i]*p;return 10*p;}
function clock(t,st){var d=0;while(d<3){var v=st/1000*Math.pow(10,d);if(Math.abs(v-Math.round(v))<1e-6)break;d++;}
 var s=Math.round(t/1000*Math.pow(10,d))/Math.pow(10,d);if(s===0)s=0;
 if(Math.abs(s)>=60){var m=Math.floor(s/60),r=(s-m*60).toFixed(d);if(r.length<(d?d+3:2))r='0'+r;return m+'m'+r+'s';}
 return s.toFixed(d)+'s';}
function range(svg){return svg._z||[num(svg,'data-t0'),num(svg,'data-t1')];}
function layout(svg,t0,t1){
 var T0=num(svg,'data-t0'),T1=num(svg,'data-t1');
 t0=Math.max(T0,t0);t1=Math.min(T1,t1);if(!(t1-t0>=1)){var c=(t0+t1)/2;t0=c-0.5;t1=c+0.5;}
 svg._z=[t0,t1];
 var x=function(t){t=Math.min(Math.max(t,t0),t1);return L+(t-t0)/(t1-t0)*(R-L);};
 var show=function(el,on){el.setAttribute('display',on?'inline':'none');};
 all(svg,'rect.window').forEach(function(r){var s=num(r,'data-s'),e=num(r,'data-e'),a=x(s),b=Math.max(x(e),a+3);
  r.setAttribute('x',a.toFixed(1));r.setAttribute('width',(b-a).toFixed(1));show(r,e>=t0&&s<=t1);
  var l=r.nextElementSibling;while(l&&!l.classList.contains('wlabel')){
   if(l.classList.contains('done')){var d=num(l,'data-t'),dx=x(d).toFixed(1);l.setAttribute('x1',dx);l.setAttribute('x2',dx);show(l,d>=t0&&d<=t1);}
   l=l.nextElementSibling;}
  if(l){l.setAttribute('x',(a+4).toFixed(1));show(l,e>=t0&&s<=t1&&b-a>num(l,'data-w')+8);}});
 all(svg,'g.interval').forEach(function(g){var s=num(g,'data-s'),e=num(g,'data-e'),a=x(s),b=Math.max(x(e),a+3);
  var r=g.querySelector('rect'),l=g.querySelector('text.label'),w=num(l,'data-w');
  r.setAttribute('x',a.toFixed(1));r.setAttribute('width',(b-a).toFixed(1));show(g,e>=t0&&s<=t1);
  var lx,end=false,fill=r.getAttribute('fill');
  if(b-a>=w+6){lx=a+3;fill='#fff';}else if(b+3+w<=W-2||a-3-w<L){lx=b+3;}else{lx=a-3;end=true;}
  l.setAttribute('x',lx.toFixed(1));l.setAttribute('text-anchor',end?'end':'start');l.setAttribute('fill',fill);});
 all(svg,'g.turn,g.lost').forEach(function(g){var t=num(g,'data-t');g.setAttribute('transform','translate('+x(t).toFixed(1)+' 0)');show(g,t>=t0&&t<=t1);});
 var ax=svg.querySelector('g.axis'),NS=svg.namespaceURI,h=svg.viewBox.baseVal.height;
 while(ax.firstChild)ax.removeChild(ax.firstChild);
 var st=step(t1-t0),n=0;
 for(var t=Math.ceil(t0/st)*st;t<=t1&&n<40;t+=st,n++){var X=x(t).toFixed(1),ln=document.createElementNS(NS,'line');
  ln.setAttribute('x1',X);ln.setAttribute('x2',X);ln.setAttribute('y1','20');ln.setAttribute('y2',String(h));ln.setAttribute('stroke','#e4e7eb');ax.appendChild(ln);
  var tx=document.createElementNS(NS,'text');tx.setAttribute('x',X);tx.setAttribute('y','16');tx.setAttribute('font-size','11');tx.setAttribute('fill','#555');tx.setAttribute('text-anchor','middle');tx.textContent=clock(t,st);ax.appendChild(tx);}
 var z=svg.parentNode.previousElementSibling;
 if(z&&z.classList.contains('zoom')){z.querySelector('.z0').value=(t0/1000).toFixed(3);z.querySelector('.z1').value=(t1/1000).toFixed(3);}
}
function toTime(svg,ev){var p=svg.createSVGPoint();p.x=ev.clientX;p.y=ev.clientY;p=p.matrixTransform(svg.getScreenCTM().inverse());
 var z=range(svg);return z[0]+(Math.min(Math.max(p.x,L),R)-L)/(R-L)*(z[1]-z[0]);}
all(document,'svg.tl[data-t0]').forEach(function(svg){
 var z=svg.parentNode.previousElementSibling,drag=null,brush=null,moved=false;
 z.querySelector('.zgo').addEventListener('click',function(){layout(svg,parseFloat(z.querySelector('.z0').value)*1000,parseFloat(z.querySelector('.z1').value)*1000);});
 z.querySelector('.zall').addEventListener('click',function(){layout(svg,-Infinity,Infinity);});
 z.querySelector('.zout').addEventListener('click',function(){var r=range(svg),c=(r[0]+r[1])/2,s=r[1]-r[0];layout(svg,c-s,c+s);});
 all(z,'input').forEach(function(i){i.addEventListener('keydown',function(ev){if(ev.key==='Enter')z.querySelector('.zgo').click();});});
 svg.addEventListener('mousedown',function(ev){drag=toTime(svg,ev);moved=false;});
 svg.addEventListener('mousemove',function(ev){if(drag===null)return;var t=toTime(svg,ev),r=range(svg),k=(R-L)/(r[1]-r[0]);
  if(Math.abs(t-drag)*k<4)return;moved=true;
  if(!brush){brush=document.createElementNS(svg.namespaceURI,'rect');brush.setAttribute('fill','#1f6fb5');brush.setAttribute('fill-opacity','0.15');brush.setAttribute('y','0');brush.setAttribute('height',String(svg.viewBox.baseVal.height));svg.appendChild(brush);}
  var a=L+(Math.min(t,drag)-r[0])*k;brush.setAttribute('x',a.toFixed(1));brush.setAttribute('width',(Math.abs(t-drag)*k).toFixed(1));ev.preventDefault();});
 svg.addEventListener('mouseup',function(ev){if(drag!==null&&moved){var t=toTime(svg,ev);layout(svg,Math.min(t,drag),Math.max(t,drag));}
  if(brush){svg.removeChild(brush);brush=null;}drag=null;});
 svg.addEventListener('click',function(ev){if(moved){moved=false;return;}
  var el=ev.target;while(el&&el!==svg&&!(el.classList&&(el.classList.contains('turn')||el.classList.contains('window'))))el=el.parentNode;
  if(!el||el===svg)return;
  if(el.classList.contains('turn')){var t=num(el,'data-t'),next=Infinity,last=t;
   all(el.parentNode,'g.turn').forEach(function(o){var u=num(o,'data-t');if(u>t&&u<next)next=u;});
   all(el.parentNode,'rect.window,g.interval').forEach(function(o){var s=num(o,'data-s'),e=num(o,'data-e');if(s>=t&&s<next&&e>last)last=e;});
   var end=Math.min(next,last>t?last:next);if(!isFinite(end))end=num(svg,'data-t1');
   layout(svg,t-(end-t)*0.03,end+(end-t)*0.03);}
  else{var s=num(el,'data-s'),e=num(el,'data-e'),p=Math.max((e-s)*0.1,5);layout(svg,s-p,e+p);}});
});
function hash(){var h=/#t=(-?[0-9.]+),(-?[0-9.]+)$/.exec(document.URL);
 if(h)all(document,'svg.tl[data-t0]').forEach(function(svg){layout(svg,parseFloat(h[1])*1000,parseFloat(h[2])*1000);});}
hash();window.addEventListener('hashchange',hash);
var box=document.getElementById('find'),found=document.getElementById('found'),hits=[],at=-1;
function find(){var q=box.value.trim().toLowerCase();hits=[];at=-1;
 all(document,'g.interval').forEach(function(g){var m=!!q&&g.getAttribute('data-find').indexOf(q)>=0;g.classList.toggle('hit',m);if(m)hits.push(g);});
 all(document,'svg.tl').forEach(function(s){s.classList.toggle('finding',!!q);});
 all(document,'tr[data-find]').forEach(function(r){var m=!q||r.getAttribute('data-find').indexOf(q)>=0;r.style.display=m?'':'none';r.classList.toggle('hit',!!q&&m);});
 found.textContent=q?hits.length+(hits.length===1?' call matches':' calls match')+(hits.length?' (Enter: next)':''):'';}
function go(g){var svg=g.ownerSVGElement,s=num(g,'data-s'),e=num(g,'data-e'),p=Math.max((e-s)*3,500);layout(svg,s-p,e+p);
 svg.parentNode.previousElementSibling.scrollIntoView({block:'start'});}
function next(){if(!hits.length)return;at=(at+1)%hits.length;go(hits[at]);found.textContent='call '+(at+1)+' of '+hits.length;}
box.addEventListener('input',find);
box.addEventListener('keydown',function(ev){if(ev.key==='Enter')next();});
document.getElementById('findnext').addEventListener('click',next);
all(document,'table.calls').forEach(function(tb){all(tb,'tr[data-interval]').forEach(function(tr){tr.addEventListener('click',function(){
 var id=tr.getAttribute('data-interval'),el=tb.previousElementSibling;
 while(el&&!(el.classList&&el.classList.contains('trace'))){
  if(el.classList&&el.classList.contains('scroll')){var g=all(el,'g.interval').filter(function(x){return x.getAttribute('data-interval')===id;})[0];if(g){go(g);return;}}
  el=el.previousElementSibling;}});});});
})();
